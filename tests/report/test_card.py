import json
import time

import pytest

from qdrift.cli import main
from qdrift.report.card import CardError, build_card, load_card, render_markdown, validate_card, write_card
from qdrift.store import Store

SPEC = "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit"
EST = {"estimate": -0.01, "ci_low": -0.03, "ci_high": 0.01, "p_value": 0.3}
TOOL_CALLS = {"endpoint": "fp8", "reference": "ref", "reference_runs": 3, "requests": 120, "requests_file": "r.jsonl",
              "requests_sha256": "a" * 64, "margin": 0.02, "alpha": 0.05, "validity_difference": EST,
              "trigger_f1": {**EST, "estimate": 0.9}, "trigger_f1_floor": {**EST, "estimate": 0.91},
              "trigger_agreement_minus_floor": EST, "schema_accuracy": {**EST, "estimate": 0.99},
              "conclusion": "equivalent within ±0.02", "verified": "2025-01-01T00:00:00+00:00"}


def test_card_validates_round_trips_and_renders(tmp_path):
    card = build_card(SPEC, "my-model", TOOL_CALLS, created="2025-01-02T00:00:00+00:00")
    js, md = write_card(card, tmp_path)
    assert load_card(js) == card
    text = md.read_text()
    assert "**Precision:** KV cache: FP8-e4m3 (unit scales); weights: INT4 g128 (decode), FP8-e4m3 (prefill)" in text
    assert f"`{SPEC}`" in text and "equivalent within ±0.02" in text and "0.910 [-0.030, 0.010]" in text
    assert card["dates"]["verified"] == TOOL_CALLS["verified"] and card["spec"] == SPEC


def test_a_card_missing_a_field_is_rejected_naming_it(tmp_path):
    card = build_card(SPEC, "m")
    del card["spec"]
    (tmp_path / "card.json").write_text(json.dumps(card))
    with pytest.raises(CardError, match="'spec' is a required property"):
        load_card(tmp_path / "card.json")
    bad = build_card(SPEC, "m", TOOL_CALLS)
    bad["verification"]["tool_calls"]["requests_sha256"] = "not-a-hash"
    with pytest.raises(CardError, match="verification/tool_calls"):
        validate_card(bad)
    with pytest.raises(CardError, match="unknown card schema version '9.9'"):
        validate_card({**card, "schema_version": "9.9"})


def _store(path, code="cd" * 32):
    store = Store(path)
    store.check_model("organism", "ab" * 32)  # as a sweep records it
    now = time.time()
    for config in ("baseline", SPEC):
        base = {"model": "organism", "config": config, "spec": config, "kind": "short_form", "task": "keys"}
        items = [{"item": i, "correct": i % 5 != 0 if config == SPEC else i % 10 != 0} for i in range(40)]
        store.record_done(f"sf-{config}", base, {"item": items}, now, now, code=code)
        for h in (1, 4):
            cfg = {**base, "kind": "agent", "task": "pointer_chase", "horizon": h}
            eps = [{"env": "pointer_chase", "horizon": h, "seed": s, "trial": 0,
                    "success": s % (2 if config == SPEC else 3) != 0} for s in range(12)]
            store.record_done(f"a-{config}-{h}", cfg, {"episode": eps}, now, now, code=code)
    store.close()


def test_card_command_reads_a_store_and_hashes_it(tmp_path, capsys):
    _store(tmp_path / "s.sqlite")
    assert main(["card", "--spec", SPEC, "--served-model", "m", "--store", str(tmp_path / "s.sqlite"),
                 "--out", str(tmp_path / "card")]) == 0
    card = load_card(tmp_path / "card" / "card.json")
    (sf,) = card["verification"]["short_form"]
    # baseline misses items 0, 10, 20, 30 (36/40); the variant also misses 5, 15, 25, 35 (32/40)
    assert (sf["accuracy_baseline"], sf["accuracy"], sf["items"]) == (0.9, 0.8, 40)
    assert sf["delta"]["estimate"] == pytest.approx(-0.1) and sf["delta"]["ci_low"] < -0.1 < sf["delta"]["ci_high"]
    lh = {r["horizon"]: r for r in card["verification"]["long_horizon"]}
    assert lh[4]["success"]["estimate"] == 0.5 and lh[4]["success_baseline"] == pytest.approx(8 / 12)
    assert lh[4]["success"]["ci_low"] < 0.5 < lh[4]["success"]["ci_high"]
    assert card["data"][0]["role"] == "results store" and len(card["data"][0]["sha256"]) == 64
    assert card["data"][1]["path"] == "organism" and card["data"][1]["sha256"] == "ab" * 32
    assert card["data"][2]["path"] == "qdrift" and card["data"][2]["sha256"] == "cd" * 32
    assert not any("not known" in n for n in card["notes"])
    assert any("without a KV cache" in n for n in card["notes"])
    assert "INT4 g128 (decode)" in capsys.readouterr().out


def test_a_card_says_when_some_results_were_measured_by_code_no_one_recorded(tmp_path):
    _store(tmp_path / "s.sqlite", code=None)  # results from a qdrift before code fingerprints
    with Store(tmp_path / "s.sqlite") as store:  # and one more by recorded code
        store.record_done("more", {"model": "organism", "config": "baseline", "spec": "baseline", "kind": "agent",
                                   "task": "ledger", "horizon": 1}, {"episode": []}, 1.0, 1.0, code="ef" * 32)
    assert main(["card", "--spec", SPEC, "--served-model", "m", "--store", str(tmp_path / "s.sqlite"),
                 "--out", str(tmp_path / "card")]) == 0
    card = load_card(tmp_path / "card" / "card.json")
    assert [d["sha256"] for d in card["data"] if d["path"] == "qdrift"] == ["ef" * 32]
    assert any("that code is not known" in n for n in card["notes"])


def test_card_command_reads_a_verify_run(tmp_path, monkeypatch):
    from qdrift import cli_verify
    from qdrift.verify.requests import read_requests
    from tests.verify.fakes import FakeEndpoint, expected_of

    f = tmp_path / "r.jsonl"
    # 80 requests: an endpoint that agrees on all of them is equivalent within 0.05 by the exact bound
    # (0.95^80 < 0.05); 16 agreeing requests would leave a 17-point difference open
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "2", "--seeds", "20", "--out", str(f)])
    exp = expected_of(read_requests(f))
    monkeypatch.setattr(cli_verify, "make_endpoint", lambda n, u, m, a: FakeEndpoint(n, exp))
    main(["verify", "run", "--requests", str(f), "--reference", "ref=http://h/v1", "--endpoint", "fp8=http://g/v1",
          "--model", "m", "--margin", "0.05", "--n-boot", "50", "--out", str(tmp_path / "v")])
    assert main(["card", "--spec", SPEC, "--served-model", "m", "--verify", str(tmp_path / "v"),
                 "--out", str(tmp_path / "c")]) == 0
    card = load_card(tmp_path / "c" / "card.json")
    t = card["verification"]["tool_calls"]
    assert t["endpoint"] == "fp8" and t["conclusion"] == "equivalent within ±0.05" and t["reference_runs"] == 3
    from qdrift.verify.requests import file_sha256

    assert card["data"][0]["sha256"] == file_sha256(f) == t["requests_sha256"]
    md = render_markdown(card)
    assert "equivalent within ±0.05" in md
    assert t["requests_analysed"] == t["requests"] and t["requests_dropped"] == 0
    assert f"{t['requests']} requests ({t['requests']} analysed: 0 failed in some run" in md
    assert "| measure | estimate [95% CI] |" in md
    t["alpha"] = 0.01
    assert "| measure | estimate [99% CI] |" in render_markdown(card)  # the level the verification used


class Fingerprinted:
    """A fake endpoint whose answers carry a server fingerprint, as qdrift serve's do."""

    def __init__(self, inner, fingerprint):
        self.inner, self.name, self.fingerprint = inner, inner.name, fingerprint

    def complete(self, body, request_id):
        out = self.inner.complete(body, request_id)
        out.response["system_fingerprint"] = self.fingerprint
        return out


def verified_card(tmp_path, monkeypatch, fingerprint, spec=SPEC):
    from qdrift import cli_verify
    from qdrift.verify.requests import read_requests
    from tests.verify.fakes import FakeEndpoint, expected_of

    f = tmp_path / "r.jsonl"
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "2", "--seeds", "3", "--out", str(f)])
    exp = expected_of(read_requests(f))
    monkeypatch.setattr(cli_verify, "make_endpoint",
                        lambda n, u, m, a: Fingerprinted(FakeEndpoint(n, exp), fingerprint) if fingerprint
                        else FakeEndpoint(n, exp))
    main(["verify", "run", "--requests", str(f), "--reference", "ref=http://h/v1", "--endpoint", "ep=http://g/v1",
          "--model", "m", "--n-boot", "20", "--out", str(tmp_path / "v")])
    main(["card", "--spec", spec, "--served-model", "m", "--verify", str(tmp_path / "v"), "--out", str(tmp_path / "c")])
    return load_card(tmp_path / "c" / "card.json")


def test_a_card_says_when_the_endpoint_names_the_spec_and_when_the_precision_is_only_declared(tmp_path, monkeypatch):
    from qdrift import __version__
    from qdrift.spec import QuantSpec

    served = f"qdrift-{__version__}-{QuantSpec.parse(SPEC).hash}"
    card = verified_card(tmp_path / "a", monkeypatch, served)
    assert card["verification"]["tool_calls"]["served_fingerprints"] == [served]
    assert f"The endpoint's answers name the spec above (system_fingerprint {served})" in render_markdown(card)
    vendor = verified_card(tmp_path / "b", monkeypatch, None)
    assert "The precision above is as declared" in render_markdown(vendor)


def test_a_card_for_a_spec_other_than_the_one_the_endpoint_served_is_refused(tmp_path, monkeypatch):
    from qdrift import __version__

    with pytest.raises(SystemExit, match=r"qdrift card: the verified endpoint's answers say it served .*-baseline"):
        verified_card(tmp_path, monkeypatch, f"qdrift-{__version__}-baseline")


def test_a_missing_store_is_refused_not_created_and_carded_as_empty(tmp_path):
    with pytest.raises(SystemExit, match="no results store at .*typo.sqlite"):
        main(["card", "--spec", SPEC, "--served-model", "m", "--store", str(tmp_path / "typo.sqlite"),
              "--out", str(tmp_path / "c")])
    assert not (tmp_path / "typo.sqlite").exists()


@pytest.mark.parametrize("make, problem", [(lambda p: p.write_text("not a database"), "is not a store qdrift can open"),
                                           (lambda p: p.mkdir(), "is a folder")], ids=["not-sqlite", "folder"])
def test_a_store_that_cannot_be_opened_is_refused_as_the_sweep_commands_refuse_it(tmp_path, make, problem):
    store = tmp_path / "s.sqlite"
    make(store)
    with pytest.raises(SystemExit) as card:
        main(["card", "--spec", SPEC, "--served-model", "m", "--store", str(store), "--out", str(tmp_path / "c")])
    with pytest.raises(SystemExit) as compare:
        main(["compare", "--store", str(store)])
    assert str(card.value) == str(compare.value)
    assert str(card.value).startswith(f"qdrift: store {store} {problem}")


def test_a_card_for_the_baseline_takes_the_word_baseline(tmp_path):
    assert main(["card", "--spec", "baseline", "--served-model", "m", "--out", str(tmp_path / "c")]) == 0
    assert load_card(tmp_path / "c" / "card.json")["spec"] == "w16-a16-kv:16"
