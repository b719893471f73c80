import json

import pytest

from qdrift import cli_verify
from qdrift.cli import main
from qdrift.verify.requests import read_requests
from tests.verify.fakes import FakeEndpoint, expected_of


def test_make_requests_then_run_against_fake_endpoints(tmp_path, monkeypatch, capsys):
    f = tmp_path / "r.jsonl"
    assert main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "1", "4", "--seeds", "3",
                 "--out", str(f)]) == 0
    reqs = read_requests(f)
    assert len(reqs) == 3 * (3 + 5)
    exp = expected_of(reqs)
    made = {}

    def fake(name, url, model, args):
        made[name] = (url, model)
        return FakeEndpoint(name, exp, seed=len(made), p_call=0.95 if name == "ref" else 0.5)

    monkeypatch.setattr(cli_verify, "make_endpoint", fake)
    out = tmp_path / "v"
    assert main(["verify", "run", "--requests", str(f), "--reference", "ref=http://h:1/v1", "--endpoint",
                 "q4=http://h:2/v1", "--model", "m", "--reference-repeats", "2", "--margin", "0.05",
                 "--n-boot", "100", "--out", str(out)]) == 0
    assert made == {"ref": ("http://h:1/v1", "m"), "q4": ("http://h:2/v1", "m")}
    report = json.loads((out / "report.json").read_text())
    assert len(report["meta"]["requests_sha256"]) == 64 and report["summaries"]["q4"]["requests"] == len(reqs)
    captured = capsys.readouterr()
    assert "q4" in captured.out
    # a progress bar per replay on stderr: it printed nothing for minutes
    for label in ("ref (run 1 of 2)", "ref (run 2 of 2)", "q4"):
        assert f"{label}: 100%" in captured.err and f"{len(reqs)}/{len(reqs)}" in captured.err
    assert (out / "journals" / "reference.r2.jsonl").exists() and (out / "journals" / "endpoint-q4.jsonl").exists()


def test_a_url_becomes_the_http_client_with_the_given_name_model_and_timeout():
    from types import SimpleNamespace

    from qdrift.backends.openai_client import OpenAIEndpoint

    ep = cli_verify.make_endpoint("ref", "http://h:8000/v1", "m", SimpleNamespace(timeout=7.5))
    assert isinstance(ep, OpenAIEndpoint)
    assert (ep.name, ep.base_url, ep.model, ep.timeout_s) == ("ref", "http://h:8000/v1", "m", 7.5)
    with pytest.raises(ValueError, match="http:// or https://"):
        cli_verify.make_endpoint("ref", "ftp://h/v1", "m", SimpleNamespace(timeout=1))


def test_bad_named_url_is_an_argument_error(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "run", "--requests", "x", "--reference", "nourl", "--model", "m", "--out", "o"])
    assert "expected NAME=URL" in capsys.readouterr().err


def test_each_endpoint_sends_only_its_own_key(monkeypatch, tmp_path):
    from types import SimpleNamespace

    monkeypatch.setenv("OPENAI_API_KEY", "sk-reference-provider")
    monkeypatch.setenv("VENDOR_KEY", "sk-vendor")
    args = SimpleNamespace(timeout=1.0, api_key_env=[("vendor", "VENDOR_KEY")], api_key_file=[])
    vendor = cli_verify.make_endpoint("vendor", "http://h:1/v1", "m", args)
    other = cli_verify.make_endpoint("other", "http://h:2/v1", "m", args)
    assert vendor._headers("x")["Authorization"] == "Bearer sk-vendor"
    assert "Authorization" not in other._headers("x")  # OPENAI_API_KEY is not sent to an endpoint not named for it
    with pytest.raises(ValueError, match="UNSET_KEY"):
        cli_verify.make_endpoint("vendor", "http://h:1/v1", "m", SimpleNamespace(
            timeout=1.0, api_key_env=[("vendor", "UNSET_KEY")], api_key_file=[]))


def test_bad_key_options_and_extra_body_are_clear_errors(tmp_path):
    f = tmp_path / "r.jsonl"
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "1", "--seeds", "1", "--out", str(f)])
    base = ["verify", "run", "--requests", str(f), "--reference", "ref=http://h:1/v1", "--model", "m",
            "--out", str(tmp_path / "v")]
    with pytest.raises(SystemExit, match="--api-key-env names nope, which is not an endpoint here"):
        main([*base, "--api-key-env", "nope=VAR"])
    with pytest.raises(SystemExit, match="--extra-body must be a JSON object"):
        main([*base, "--extra-body", "[1]"])


def test_make_requests_writes_a_temperature_when_asked(tmp_path):
    from qdrift.verify.requests import read_requests

    f = tmp_path / "r.jsonl"
    main(["verify", "make-requests", "--env", "ledger:echo=1", "--horizons", "2", "--seeds", "2", "--temperature", "0",
          "--out", str(f)])
    assert {r.body["temperature"] for r in read_requests(f)} == {0.0}
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "2", "--seeds", "2", "--out", str(f)])
    assert not any("temperature" in r.body for r in read_requests(f))


def _request_file(tmp_path):
    f = tmp_path / "r.jsonl"
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "2", "--seeds", "2", "--out", str(f)])
    return f, read_requests(f)


def test_run_exits_1_when_requests_failed_after_writing_everything_and_a_rerun_resends_only_those(
        tmp_path, monkeypatch, capsys):
    f, reqs = _request_file(tmp_path)
    exp, failing = expected_of(reqs), {"ep": frozenset(r.id for r in reqs[:3])}
    made = {}

    def fake(name, url, model, args):
        made[name] = FakeEndpoint(name, exp, fail_ids=failing.get(name, frozenset()))
        return made[name]

    monkeypatch.setattr(cli_verify, "make_endpoint", fake)
    out = tmp_path / "v"
    args = ["verify", "run", "--requests", str(f), "--reference", "ref=http://h:1/v1", "--endpoint", "ep=http://h:2/v1",
            "--model", "m", "--reference-repeats", "2", "--n-boot", "0", "--out", str(out)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert f"3 request(s) failed after their retries (ep: 3 of {len(reqs)} (http_500 3))" in err
    assert "resend only those" in err
    report = json.loads((out / "report.json").read_text())
    assert report["summaries"]["ep"]["failure_count"] == 3 and (out / "report.md").exists()
    failing.clear()  # the rerun's endpoints answer everything
    assert main(args) == 0
    assert made["ep"].sent == 3 and made["ref"].sent == 0


def test_run_refuses_a_redeployed_endpoint_unless_told_to_accept_it(tmp_path, monkeypatch):
    f, reqs = _request_file(tmp_path)
    exp, deployment = expected_of(reqs), {"fp": "fp-a"}
    monkeypatch.setattr(cli_verify, "make_endpoint",
                        lambda name, url, model, args: FakeEndpoint(name, exp, fingerprint=deployment["fp"]))
    out = tmp_path / "v"
    args = ["verify", "run", "--requests", str(f), "--reference", "ref=http://h:1/v1", "--endpoint", "ep=http://h:2/v1",
            "--model", "m", "--reference-repeats", "2", "--n-boot", "0", "--out", str(out)]
    assert main(args) == 0
    (out / "journals" / "reference.r2.jsonl").write_text("")  # the reference's second run is redone ...
    deployment["fp"] = "fp-b"  # ... after a redeployment
    with pytest.raises(SystemExit, match=r"ref's answers carry 2 system_fingerprints: 'fp-a' .*'fp-b' .*"
                                         r"--allow-mixed-fingerprints"):
        main(args)
    assert main([*args, "--allow-mixed-fingerprints"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["system_fingerprints"]["ref"] == {"fp-a": len(reqs), "fp-b": len(reqs)}
    assert any("accepted with --allow-mixed-fingerprints" in n for n in report["notes"])
