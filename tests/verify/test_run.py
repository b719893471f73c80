import json

import pytest

from qdrift.backends.endpoint import read_journal
from qdrift.verify.generate import make_requests
from qdrift.verify.report import render_markdown, render_text, write_report
from qdrift.verify.run import analyse, journal_path, verify_endpoints
from tests.verify.fakes import FakeEndpoint, Killed, expected_of


@pytest.fixture(scope="module")
def requests():
    return make_requests(["pointer_chase"], [1, 4], seeds=6)


def test_a_replay_killed_midway_resumes_without_resending_answered_requests(requests, tmp_path):
    exp = expected_of(requests)
    ref = FakeEndpoint("ref", exp)
    dying = FakeEndpoint("ep", exp, fail_after=7)
    with pytest.raises(Killed):
        verify_endpoints(requests, ("ref", ref), {"ep": dying}, tmp_path, repeats=2, concurrency=1)
    assert len(read_journal(journal_path(tmp_path, "ep"))) == 7
    assert ref.sent == 2 * len(requests)
    again_ref, again = FakeEndpoint("ref", exp), FakeEndpoint("ep", exp)
    run = verify_endpoints(requests, ("ref", again_ref), {"ep": again}, tmp_path, repeats=2, concurrency=1)
    assert again_ref.sent == 0 and again.sent == len(requests) - 7
    assert all(s.ok for s in run.endpoints["ep"]) and len(run.reference_runs) == 2
    assert all(s.oracle_match for s in run.endpoints["ep"])


def test_report_has_a_row_per_run_and_writes_markdown_json_and_plot(requests, tmp_path):
    exp = expected_of(requests)
    run = verify_endpoints(requests, ("ref", FakeEndpoint("ref", exp, seed=1, p_call=0.9, p_spurious=0.1)),
                           {"good": FakeEndpoint("good", exp, seed=2, p_call=0.9, p_spurious=0.1),
                            "lossy": FakeEndpoint("lossy", exp, seed=3, p_call=0.6, p_invalid=0.3)},
                           tmp_path, repeats=3)
    analysis = analyse(run, margin=0.05, n_boot=200)
    text = render_text(analysis)
    assert text.splitlines()[0].startswith("run") and "ref (run 3)" in text and "Noise floor over 3" in text
    md = render_markdown(analysis)
    assert sum(line.startswith("| ") for line in md.splitlines()) == 1 + 5 and "lossy vs reference" in md
    paths = write_report(analysis, tmp_path / "out", {"requests_sha256": "x"})
    data = json.loads(paths["json"].read_text())
    assert data["meta"] == {"requests_sha256": "x"} and data["reference_runs"] == 3
    assert data["endpoints"]["lossy"]["conclusion"].startswith("different")
    assert paths["plot"].stat().st_size > 1000


def test_names_must_be_usable_as_file_names(requests, tmp_path):
    with pytest.raises(ValueError, match="endpoint name 'a/b'"):
        verify_endpoints(requests, ("ref", FakeEndpoint("r", {})), {"a/b": FakeEndpoint("x", {})}, tmp_path)


def test_a_rerun_against_another_endpoint_or_other_requests_is_refused_not_mixed(requests, tmp_path):
    from qdrift.backends.openai_client import OpenAIEndpoint

    exp = expected_of(requests)
    verify_endpoints(requests, ("ref", FakeEndpoint("ref", exp)), {"ep": FakeEndpoint("ep", exp)}, tmp_path, repeats=1)
    meta = json.loads((journal_path(tmp_path, "ep").parent / "endpoint-ep.jsonl.meta.json").read_text())
    assert meta["name"] == "ep" and len(meta["bodies_sha256"]) == 64
    with pytest.raises(ValueError, match=r"reference.r1.jsonl holds answers for other name"):
        verify_endpoints(requests, ("ref", FakeEndpoint("ref2", exp)), {}, tmp_path, repeats=1)
    with pytest.raises(ValueError, match=r"reference.r1.jsonl holds answers for other bodies_sha256"):
        verify_endpoints(requests[:-1], ("ref", FakeEndpoint("ref", exp)), {"ep": FakeEndpoint("ep", exp)},
                         tmp_path, repeats=1)
    # an HTTP endpoint is known by its URL and model, not by the name given to it
    a = OpenAIEndpoint("http://127.0.0.1:9/v1", "m", name="x", api_key_env=None)
    b = OpenAIEndpoint("http://127.0.0.1:8/v1", "m", name="x", api_key_env=None)
    from qdrift.backends.endpoint import journal_identity as _identity

    assert _identity(a, [])["base_url"] != _identity(b, [])["base_url"] and "name" not in _identity(a, [])


def test_a_resume_against_a_redeployed_server_is_refused_not_mixed(requests, tmp_path):
    exp = expected_of(requests)
    ref = FakeEndpoint("ref", exp, fingerprint="fp-ref")
    with pytest.raises(Killed):
        verify_endpoints(requests, ("ref", ref), {"ep": FakeEndpoint("ep", exp, fail_after=7, fingerprint="fp-old")},
                         tmp_path, repeats=2, concurrency=1)
    meta = tmp_path / "journals" / "endpoint-ep.jsonl.meta.json"
    assert json.loads(meta.read_text())["system_fingerprints"] == {"fp-old": 7}  # recorded though killed
    redeployed, new = FakeEndpoint("ep", exp, fingerprint="fp-new"), len(requests) - 7
    with pytest.raises(ValueError, match=rf"ep's answers carry 2 system_fingerprints: 'fp-new' \({new} answers\), "
                                         r"'fp-old' \(7 answers\).*new --out.*--allow-mixed-fingerprints"):
        verify_endpoints(requests, ("ref", FakeEndpoint("ref", exp, fingerprint="fp-ref")), {"ep": redeployed},
                         tmp_path, repeats=2, concurrency=1)
    assert len(read_journal(journal_path(tmp_path, "ep"))) == len(requests)  # every answer kept
    assert json.loads(meta.read_text())["system_fingerprints"] == {"fp-new": new, "fp-old": 7}
    again_ref, again = FakeEndpoint("ref", exp, fingerprint="fp-ref"), FakeEndpoint("ep", exp, fingerprint="fp-new")
    with pytest.raises(ValueError, match="2 system_fingerprints"):  # a mixed journal is refused before sending
        verify_endpoints(requests, ("ref", again_ref), {"ep": again}, tmp_path, repeats=2)
    assert again_ref.sent == again.sent == 0
    run = verify_endpoints(requests, ("ref", again_ref), {"ep": again}, tmp_path, repeats=2,
                           allow_mixed_fingerprints=True)
    assert run.fingerprints == {"ref": {"fp-ref": 2 * len(requests)}, "ep": {"fp-new": new, "fp-old": 7}}
    assert run.notes == [f"ep: answers carry 2 system_fingerprints ('fp-new' ({new} answers), 'fp-old' (7 answers)), "
                         "accepted with --allow-mixed-fingerprints"]
    assert "Note: ep: answers carry 2" in render_text(analyse(run, n_boot=0))


def test_reference_repeats_from_two_deployments_are_refused(requests, tmp_path):
    exp = expected_of(requests)
    verify_endpoints(requests, ("ref", FakeEndpoint("ref", exp, fingerprint="fp-a")), {}, tmp_path, repeats=1)
    with pytest.raises(ValueError, match=r"ref's answers carry 2 system_fingerprints: 'fp-a' .*reference.r2.jsonl"):
        verify_endpoints(requests, ("ref", FakeEndpoint("ref", exp, fingerprint="fp-b")), {}, tmp_path, repeats=2)


def test_answers_without_a_fingerprint_are_noted_not_refused(requests, tmp_path):
    exp = expected_of(requests)
    run = verify_endpoints(requests, ("ref", FakeEndpoint("ref", exp, fingerprint="fp-a")),
                           {"ep": FakeEndpoint("ep", exp)}, tmp_path, repeats=2)
    assert run.fingerprints == {"ref": {"fp-a": 2 * len(requests)}, "ep": {}}
    assert run.notes == [f"ep: no system_fingerprint in {len(requests)} answer(s), so a redeployment between runs "
                         "cannot be detected for them"]
    data = json.loads(write_report(analyse(run, n_boot=0), tmp_path / "out")["json"].read_text())
    assert data["notes"] == run.notes and data["system_fingerprints"]["ep"] == {}
