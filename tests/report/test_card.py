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
    assert main(["card", "--spec", SPEC, "--served-model", "organism", "--store", str(tmp_path / "s.sqlite"),
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
    assert main(["card", "--spec", SPEC, "--served-model", "organism", "--store", str(tmp_path / "s.sqlite"),
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


SAME = "the endpoint's"


def verified_card(tmp_path, monkeypatch, fingerprint, spec=SPEC, served_model="m", reference_fingerprint=SAME):
    """The card of endpoint `ep` verified (with --model m) against `ref`, each answering with its fingerprint."""
    from qdrift import cli_verify
    from qdrift.verify.requests import read_requests
    from tests.verify.fakes import FakeEndpoint, expected_of

    f = tmp_path / "r.jsonl"
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "2", "--seeds", "3", "--out", str(f)])
    exp = expected_of(read_requests(f))
    prints = {"ep": fingerprint, "ref": fingerprint if reference_fingerprint == SAME else reference_fingerprint}
    monkeypatch.setattr(cli_verify, "make_endpoint",
                        lambda n, u, m, a: Fingerprinted(FakeEndpoint(n, exp), prints[n]) if prints[n]
                        else FakeEndpoint(n, exp))
    main(["verify", "run", "--requests", str(f), "--reference", "ref=http://h/v1", "--endpoint", "ep=http://g/v1",
          "--model", "m", "--n-boot", "20", "--out", str(tmp_path / "v")])
    main(["card", "--spec", spec, "--served-model", served_model, "--verify", str(tmp_path / "v"),
          "--out", str(tmp_path / "c")])
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


def test_a_card_for_another_model_than_the_verification_asked_for_is_refused(tmp_path, monkeypatch):
    with pytest.raises(SystemExit, match=r"--served-model 'Llama-3-70B-Instruct' is not the model the verification "
                                         r"asked for: .* for model 'm' \(--model\); give --served-model 'm'"):
        verified_card(tmp_path, monkeypatch, None, served_model="Llama-3-70B-Instruct")
    assert not (tmp_path / "c").exists()
    assert verified_card(tmp_path / "ok", monkeypatch, None)["verification"]["tool_calls"]["model"] == "m"


def test_a_card_for_another_model_than_the_stores_is_refused_unless_the_mapping_is_said(tmp_path):
    _store(tmp_path / "s.sqlite")  # results of model 'organism'

    def card(*extra):
        main(["card", "--spec", SPEC, "--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "c"), *extra])
        return load_card(tmp_path / "c" / "card.json")

    with pytest.raises(SystemExit, match=r"the store's results are of model 'organism', not --served-model "
                                         r"'Llama-3-70B-Instruct'; give --served-model 'organism', or, .*"
                                         r"say so with --store-model 'organism'"):
        card("--served-model", "Llama-3-70B-Instruct")
    with pytest.raises(SystemExit, match=r"no results of model 'orgnism' \(--store-model\); its models: organism"):
        card("--served-model", "orgnism", "--store-model", "orgnism")  # not an empty card
    said = card("--served-model", "my-organism", "--store-model", "organism")  # served under another name
    assert said["served_model"] == "my-organism" and said["verification"]["long_horizon"]
    assert any("results are of model 'organism', which the card's served model 'my-organism' serves under another "
               "name" in n for n in said["notes"])
    assert "serves under another name" in render_markdown(said)


def test_a_card_names_what_the_reference_served_and_warns_when_it_was_not_the_unquantized_model(tmp_path,
                                                                                              monkeypatch):
    from qdrift import __version__
    from qdrift.spec import QuantSpec

    served = f"qdrift-{__version__}-{QuantSpec.parse(SPEC).hash}"
    caution = "the tool-call verdict is relative to that reference, not to the unquantized model"
    good = verified_card(tmp_path / "a", monkeypatch, served, reference_fingerprint=f"qdrift-{__version__}-baseline")
    t = good["verification"]["tool_calls"]
    assert t["reference_fingerprints"] == [f"qdrift-{__version__}-baseline"] and t["reference_served"] == "baseline"
    assert not any(caution in n for n in good["notes"])
    assert "The reference's answers say a qdrift server served it with nothing quantized" in render_markdown(good)
    # the quantized endpoint verified against itself as "reference"
    selfref = verified_card(tmp_path / "b", monkeypatch, served)
    t = selfref["verification"]["tool_calls"]
    assert t["reference_fingerprints"] == [served] and t["reference_served"] == "quantized"
    assert any(f"served a quantized spec (hash {QuantSpec.parse(SPEC).hash}, the spec of this card" in n
               and caution in n for n in selfref["notes"])
    md = render_markdown(selfref)
    assert "**Reference:** the reference `ref` served a quantized spec" in md and caution in md
    assert md.count(caution) == 1  # beside the verdict, not again among the notes
    # a reference that is not a qdrift server: what it served is not known
    vendor = verified_card(tmp_path / "c", monkeypatch, served, reference_fingerprint="fp_vendor_1")
    t = vendor["verification"]["tool_calls"]
    assert t["reference_fingerprints"] == ["fp_vendor_1"] and t["reference_served"] == "unknown"
    assert any("do not say what it served (system_fingerprint fp_vendor_1" in n and caution in n
               for n in vendor["notes"])


def _agent_cells(path, cells, model="organism"):
    """A store of agent cells: (config, horizon, seeds, {setting fields}), each success on even seeds
    (the baseline's) or on seeds divisible by 3 (a variant's)."""
    now = time.time()
    with Store(path) as store:
        store.check_model(model, "ab" * 32)
        for i, (config, horizon, seeds, setting) in enumerate(cells):
            cfg = {"model": model, "config": config, "spec": config, "kind": "agent", "task": "pointer_chase",
                   "horizon": horizon, "seeds": list(seeds), "knobs": {}, "max_new_tokens": 32,
                   "qdrift_version": "0.1.0", **setting}
            eps = [{"env": "pointer_chase", "horizon": horizon, "seed": s, "trial": 0,
                    "success": s % (2 if config == "baseline" else 3) == 0} for s in seeds]
            store.record_done(f"cell{i}", cfg, {"episode": eps}, now, now, code="cd" * 32)


@pytest.mark.parametrize("setting", [{"knobs": {"distractors": 40}}, {"dtype": "bfloat16"},
                                     {"qdrift_version": "0.0.9"}, {"prompt": {"system": "be brief"}}],
                         ids=["knobs", "dtype", "version", "prompt"])
def test_cells_of_one_env_and_horizon_in_different_settings_are_rows_apart_never_pooled(tmp_path, setting):
    cells = [(c, 4, range(3), {}) for c in ("baseline", SPEC)] + [(c, 4, range(10, 13), setting)
                                                                  for c in ("baseline", SPEC)]
    _agent_cells(tmp_path / "s.sqlite", cells)
    main(["card", "--spec", SPEC, "--served-model", "organism", "--store", str(tmp_path / "s.sqlite"),
          "--out", str(tmp_path / "c")])
    card = load_card(tmp_path / "c" / "card.json")
    rows = card["verification"]["long_horizon"]
    assert [r["episodes"] for r in rows] == [3, 3]
    (key,) = setting
    (other,) = [r for r in rows if r["setting"].get(key) == setting[key]]  # each row names its setting
    assert other["success"]["estimate"] == pytest.approx(1 / 3) and other["success_baseline"] == pytest.approx(2 / 3)
    md = (tmp_path / "c" / "card.md").read_text()
    assert "| env | horizon | episodes | baseline | success [95% CI] | delta [95% CI] | setting |" in md
    assert f"{key} `{json.dumps(setting[key], sort_keys=True)}`" in md  # the row's distinguishing field


def test_a_variant_setting_the_baseline_was_not_measured_in_is_refused_naming_both(tmp_path):
    _agent_cells(tmp_path / "s.sqlite", [("baseline", 4, range(3), {}), (SPEC, 4, range(3), {"dtype": "bfloat16"})])
    with pytest.raises(SystemExit, match=r"no 'baseline' results of pointer_chase L=4 in the setting .* was "
                                         r"measured in \(.*\"dtype\":\"bfloat16\".*\); the baseline's settings "
                                         r"there: .*measure the baseline in that setting"):
        main(["card", "--spec", SPEC, "--served-model", "organism", "--store", str(tmp_path / "s.sqlite"),
              "--out", str(tmp_path / "c")])


def test_a_card_of_the_baseline_reads_the_stores_baseline_cells(tmp_path):
    _agent_cells(tmp_path / "s.sqlite", [(c, 4, range(4), {}) for c in ("baseline", SPEC)])
    assert main(["card", "--spec", "baseline", "--served-model", "organism", "--store", str(tmp_path / "s.sqlite"),
                 "--out", str(tmp_path / "c")]) == 0
    card = load_card(tmp_path / "c" / "card.json")
    (row,) = card["verification"]["long_horizon"]
    assert card["spec"] == "w16-a16-kv:16" and row["episodes"] == 4 and row["success"]["estimate"] == 0.5
    assert row["delta"]["estimate"] is None  # the baseline against itself: no difference is claimed
    assert "| pointer_chase | 4 | 4 | 0.500 | 0.500 [" in (tmp_path / "c" / "card.md").read_text()


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
