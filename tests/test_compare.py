"""`qdrift compare`: a markdown report of every variant vs the baseline from a store, with PNG plots."""

import random

import pytest

from qdrift.cli import main
from qdrift.compare import build_report
from qdrift.store import Store, cell_key


def fill(store: Store, configs=("baseline", "w4g128-a16-kv:16"), horizons=(1, 4), seeds=12, drift=False,
         extra=None) -> None:
    rng = random.Random(0)
    for config in configs:
        p_err = 0.05 if config == "baseline" else 0.2
        for h in horizons:
            cfg = {"model": "organism", "config": config, "spec": config, "kind": "agent", "task": "pointer_chase",
                   "horizon": h, "seeds": list(range(1_000_000, 1_000_000 + seeds)), **(extra or {})}
            episodes, steps = [], []
            for i in range(seeds):
                errors = [rng.random() < p_err for _ in range(h)]
                first = errors.index(True) if any(errors) else None
                episodes.append({"episode": i, "env": "pointer_chase", "horizon": h, "seed": 1_000_000 + i, "trial": 0,
                                 "success": first is None, "steps": h, "first_error_step": first})
                steps += [{"episode": i, "step": k, "horizon": h, "correct": not e} for k, e in enumerate(errors)]
            rows = {"episode": episodes, "step": steps}
            if drift and config != "baseline":  # teacher-forced tokens: KL and flips grow with the step
                cfg["drift"] = True
                rows["drift"] = [{"episode": i, "step": k, "token_index": t, "kl": rng.expovariate(50) * (1 + k),
                                  "top1_agree": rng.random() > 0.02 * (1 + k), "base_logprob": -0.1,
                                  "var_logprob": -0.2, "env": "pointer_chase", "horizon": h, "seed": 1_000_000 + i}
                                 for i in range(seeds) for k in range(h) for t in range(5)]
            store.record_done(cell_key(cfg), cfg, rows, 0.0, 1.0)


def test_compare_writes_every_analysis_and_the_plots(tmp_path, capsys):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store)
    out = tmp_path / "rep" / "report.md"
    assert main(["compare", "--store", str(tmp_path / "r.sqlite"), "--baseline", "baseline", "--out", str(out)]) == 0
    text = out.read_text()
    for heading in ("## organism on pointer_chase", "| `w4g128-a16-kv:16` | 4 | 12 |", "### Success by horizon",
                    "### Per-step error rate vs baseline", "`w4g128-a16-kv:16` vs `baseline`: paired comparison",
                    "`w4g128-a16-kv:16` vs `baseline`: compounding", "Paired comparison: w4g128-a16-kv:16 vs baseline"):
        assert heading in text
    pngs = sorted(p.name for p in out.parent.glob("*.png"))
    assert pngs == ["report-organism-pointer_chase-first-error.png", "report-organism-pointer_chase-success.png"]
    assert all(f"({name})" in text for name in pngs)
    assert str(out) in capsys.readouterr().out


def test_compare_reports_teacher_forced_drift_per_variant_with_its_profile(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store, drift=True)
    out = tmp_path / "report.md"
    assert main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "`w4g128-a16-kv:16` vs `baseline`: teacher-forced drift (baseline's episodes)" in text
    assert "n: tokens=300, episodes=24" in text  # 12 seeds x 2 horizons: one cluster per (horizon, seed)
    assert "`w4g128-a16-kv:16`: drift along the trajectory" in text and "KL slope (nats per 100 steps)" in text
    assert (tmp_path / "report-organism-pointer_chase-w4g128-a16-kv_16-drift.png").exists()


def test_compare_counts_a_rerun_cell_once_and_names_the_one_it_left_out(tmp_path):
    # The same grid run twice, the second time with drift: the variant's cells exist twice over the
    # same seeds. Pooling them would count every episode twice; disjoint seeds are pooled.
    with Store(tmp_path / "r.sqlite") as store:
        fill(store)
        fill(store, configs=("w4g128-a16-kv:16",), drift=True)
        old = [c["key"] for c in store.cells() if not c["config"].get("drift") and c["config"]["spec"] != "baseline"]
        more = {"model": "organism", "config": "baseline", "spec": "baseline", "kind": "agent",
                "task": "pointer_chase", "horizon": 1, "seeds": [2_000_000]}
        store.record_done(cell_key(more), more, {"episode": [
            {"episode": 0, "env": "pointer_chase", "horizon": 1, "seed": 2_000_000, "trial": 0, "success": True,
             "steps": 1, "first_error_step": None}]}, 0.0, 1.0)
    out = tmp_path / "report.md"
    assert main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "| `w4g128-a16-kv:16` | 4 | 12 |" in text and "| `baseline` | 1 | 13 |" in text
    assert "left out, superseded by a later cell" in text and all(k in text for k in old)
    assert "5 done cells, 0 failed" in text


def test_compare_says_why_an_analysis_is_missing_instead_of_failing(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store, configs=("w8-a16-kv:16",), horizons=(1,))
    main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "r.md")])
    text = (tmp_path / "r.md").read_text()
    assert "No baseline: no rows with config 'baseline' (configs here: w8-a16-kv:16)" in text


def test_compare_pairs_short_form_items_by_item_id(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        for config, wrong in (("baseline", {3}), ("w4g128-a16-kv:16", {3, 5, 7})):
            cfg = {"model": "organism", "config": config, "spec": config, "kind": "short_form", "task": "arith"}
            items = [{"item": i, "correct": i not in wrong} for i in range(10)]
            store.record_done(cell_key(cfg), cfg, {"item": items}, 0.0, 1.0)
    main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "r.md")])
    text = (tmp_path / "r.md").read_text()
    assert "## organism on arith (short form)" in text and "| `w4g128-a16-kv:16` | 10 | 0.7000 |" in text
    assert "Paired comparison: w4g128-a16-kv:16 vs baseline" in text and "n: items=10" in text


def test_compare_reports_flips_kl_and_gold_logprob_for_lm_eval_rows(tmp_path):
    import math

    def item(doc, p_gold):  # two choices, gold first; the answer is the argmax
        logp = [math.log(p_gold), math.log(1 - p_gold)]
        return {"item": f"t/none/{doc}", "task": "t", "filter": "none", "doc_id": doc, "correct": float(p_gold > 0.5),
                "answer": str(int(p_gold <= 0.5)), "gold_logprob": logp[0], "choice_logprob": logp}

    with Store(tmp_path / "r.sqlite") as store:
        for config, probs in (("baseline", [0.9] * 8), ("w3g128-a16-kv:16", [0.9] * 6 + [0.4, 0.3])):
            cfg = {"model": "organism", "config": config, "spec": config, "kind": "short_form", "task": "t"}
            store.record_done(cell_key(cfg), cfg, {"item": [item(d, p) for d, p in enumerate(probs)]}, 0.0, 1.0)
    main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(tmp_path / "r.md")])
    text = (tmp_path / "r.md").read_text()
    assert "paired accuracy, flip rate, KL and gold log-prob" in text and "2 of 8 answers changed" in text
    kl = (2 * (0.9 * math.log(0.9 / 0.4) + 0.1 * math.log(0.1 / 0.6)) / 8,
          (0.9 * math.log(0.9 / 0.3) + 0.1 * math.log(0.1 / 0.7)) / 8)
    row = next(line for line in text.splitlines() if line.strip().startswith("mean KL"))
    assert f"{kl[0] / 2 + kl[1]:.4f}" in row


def test_compare_without_a_store_names_the_command_that_makes_one(tmp_path):
    with pytest.raises(SystemExit, match="run `qdrift sweep run FILE --store"):
        main(["compare", "--store", str(tmp_path / "none.sqlite")])


def test_short_form_items_without_a_score_are_counted_and_left_out_not_a_crash():
    from qdrift.compare import _short_form_section

    items = [{"config": c, "doc_id": i, "correct": (None if i == 2 else float(i % 2))}
             for c in ("baseline", "w8-a16-kv:16") for i in range(4)]
    text = "\n".join(_short_form_section("organism", "t", items, "baseline"))
    assert "| `baseline` | 3 | 0.6667 |" in text
    assert "Items without a score (no recognised metric), left out: `baseline` 1, `w8-a16-kv:16` 1" in text


def test_cells_measured_in_another_setting_are_reported_apart_never_pooled_or_superseded(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store, extra={"knobs": {}, "max_new_tokens": 32})
        fill(store, extra={"knobs": {"slack": 1}, "max_new_tokens": 32})  # the same seeds, another setting
    out = tmp_path / "report.md"
    assert main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "superseded" not in text and "8 done cells" in text
    assert text.count("## organism on pointer_chase [") == 2
    assert '## organism on pointer_chase [{"knobs":{"slack":1},"max_new_tokens":32}]' in text
    assert text.count("| `baseline` | 4 | 12 |") == 2  # each section has its own 12 episodes, not 24


def test_cells_run_on_a_gpu_are_reported_apart_from_cpu_cells(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store, extra={"knobs": {}})
        fill(store, extra={"knobs": {}, "device": "cuda"})  # the same cells, another device's rounding
    out = tmp_path / "report.md"
    assert main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(out)]) == 0
    text = out.read_text()
    assert '## organism on pointer_chase [{"device":"cuda","knobs":{}}]' in text
    assert text.count("| `baseline` | 4 | 12 |") == 2


def test_the_report_does_not_depend_on_the_order_cells_were_committed(tmp_path):
    reports = []
    for order in (("baseline", "w4g128-a16-kv:16", "w8-a16-kv:16"), ("w8-a16-kv:16", "w4g128-a16-kv:16", "baseline")):
        path = tmp_path / f"{order[0]}.sqlite"
        with Store(path) as store:
            for config in order:
                fill(store, configs=(config,))
        out = tmp_path / order[0] / "report.md"
        assert main(["compare", "--store", str(path), "--out", str(out)]) == 0
        reports.append(out.read_text().split("\n", 1)[1])  # past the title, which names the store
    assert reports[0] == reports[1]


def test_a_baseline_no_cell_has_is_refused_naming_the_configs(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store)
    with pytest.raises(SystemExit, match="no done cell has config 'basline'.*configs in .*: baseline"):
        main(["compare", "--store", str(tmp_path / "r.sqlite"), "--baseline", "basline"])


def test_build_report_refuses_a_baseline_no_cell_has_naming_the_configs(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        fill(store)
        with pytest.raises(ValueError, match="no done cell has config 'basline'.*configs in .*: baseline, "
                                             "w4g128-a16-kv:16$"):
            build_report(store, baseline="basline", out=tmp_path / "report.md")
    assert not (tmp_path / "report.md").exists()


def test_a_baseline_rerun_on_an_edited_environment_is_never_paired_with_variants_of_the_old_file(tmp_path):
    # Only the baseline was rerun after the environment file changed: its cell and the old variant's are
    # measurements of different code, reported apart (the variant with the old baseline it was run beside).
    with Store(tmp_path / "r.sqlite") as store:
        fill(store, extra={"knobs": {}, "env_sha256": "a" * 64})
        fill(store, configs=("baseline",), extra={"knobs": {}, "env_sha256": "b" * 64})
    out = tmp_path / "report.md"
    assert main(["compare", "--store", str(tmp_path / "r.sqlite"), "--out", str(out)]) == 0
    text = out.read_text()
    assert "superseded" not in text and text.count("## organism on pointer_chase [") == 2
    assert f'"env_sha256":"{"b" * 64}"' in text


def test_a_cells_setting_is_all_of_its_configuration_but_what_names_it():
    # Any key a cell's configuration gains (the shared data's sha256, say) keeps settings apart in
    # compare and in cards alike; pairing leaves out what only a variant's cells carry.
    from qdrift.compare import VARIANT_ONLY, setting

    config = {"model": "m", "config": "w8-a16-kv:16", "spec": "w8-a16-kv:16", "spec_hash": "h", "kind": "short_form",
              "task": "gsm8k_local", "qdrift_version": "0.1.0", "runner": "lmeval", "data_sha256": "d",
              "calibration": {"env": "pointer_chase"}, "batch": 8}
    assert setting(config) == {"qdrift_version": "0.1.0", "runner": "lmeval", "data_sha256": "d",
                               "calibration": {"env": "pointer_chase"}, "batch": 8}
    assert setting(config, VARIANT_ONLY) == {"qdrift_version": "0.1.0", "runner": "lmeval", "data_sha256": "d"}
