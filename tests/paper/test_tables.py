"""The paper's table helpers on hand-made rows: what each cell shows is computed here directly."""

import math

import pytest

from qdrift.paper.tables import ModelResults, coef, kv_only

PHASED = "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit"  # a spec string with '/' in it


def episodes(config: str, first_errors: dict[int, int], horizon: int = 50, seeds: int = 30) -> list[dict]:
    return [{"env": "pointer_chase", "task": "pointer_chase", "config": config, "horizon": horizon, "seed": s,
             "trial": 0, "steps": horizon, "first_error_step": first_errors.get(s),
             "success": s not in first_errors, "stop_reason": "done"} for s in range(seeds)]


def test_a_variant_whose_spec_has_a_slash_gets_its_own_ratio_row():
    res = ModelResults("m", {"baseline": "baseline", PHASED: "phased"})
    res.episodes["pointer_chase"] = episodes("baseline", {1: 10, 2: 20}) + episodes(PHASED, {3: 5, 4: 7, 5: 9, 6: 1})
    table = res.step_error_table("pointer_chase")
    phased = next(line for line in table.splitlines() if line.startswith("| phased"))
    # 4 first errors against 2: the rate ratio is (4 / at-risk) / (2 / at-risk), at-risk counted here.
    at_risk = {"baseline": 28 * 50 + 10 + 20, PHASED: 26 * 50 + 5 + 7 + 9 + 1}
    ratio = (4 / at_risk[PHASED]) / (2 / at_risk["baseline"])
    assert "reference" not in phased and f"| {ratio:.2f} |" in phased


def test_coefficients_print_as_fixed_digits_and_rounding_noise_as_zero():
    assert coef(3e-15) == coef(-2.5e-14) == "0.000"
    assert coef(-0.8221) == "-0.822" and coef(math.nan) == "–"


def steps(config: str, json_ok: int, schema_ok: int, correct: int, n: int = 10) -> list[dict]:
    return [{"config": config, "horizon": 4, "seed": i, "json_valid": i < json_ok, "schema_valid": i < schema_ok,
             "correct": i < correct} for i in range(n)]


def items(config: str, correct: int, n: int = 100) -> list[dict]:
    return [{"config": config, "item": i, "correct": i < correct} for i in range(n)]


def test_short_form_blind_names_weight_specs_that_keep_accuracy_but_break_tool_calls_and_skips_kv_only():
    res = ModelResults("m", {})
    res.steps["pointer_chase"] = (steps("baseline", 10, 6, 4) + steps("w4g64-a16-kv:16", 2, 1, 1)
                                  + steps("w8-a16-kv:16", 10, 6, 4) + steps("w16-a16-kv:fp8e4m3@unit", 10, 1, 1))
    res.items["mmlu"] = (items("baseline", 30) + items("w4g64-a16-kv:16", 31) + items("w8-a16-kv:16", 30)
                         + items("w16-a16-kv:fp8e4m3@unit", 30))
    assert res.validity("pointer_chase", "w4g64-a16-kv:16") == {"json_valid": 0.2, "schema_valid": 0.1,
                                                                 "correct": 0.1}
    blind = res.short_form_blind("mmlu", "pointer_chase")
    assert [b["config"] for b in blind] == ["w4g64-a16-kv:16"]  # w8 keeps its calls; the KV-only spec is skipped
    assert blind[0]["diff"] == pytest.approx(0.01) and blind[0]["drop"] == pytest.approx(0.5)
    assert kv_only("w16-a16-kv:fp8e4m3@unit") and not kv_only("w4g64-a16-kv:16") and not kv_only("baseline")


def answer_episodes(config: str, first_errors: dict[int, int], horizon: int, seeds: int = 30) -> list[dict]:
    """Episodes of L steps and a final answer: L + 1 calls, the answer at 0-based step L."""
    return [{**r, "steps": horizon + 1} for r in episodes(config, first_errors, horizon, seeds)]


def test_failed_at_answer_counts_failures_whose_first_error_is_the_answer():
    res = ModelResults("m", {})
    # Horizon 50: seeds 1 and 2 fail at the answer (step 50), seed 3 earlier; seed 4 of the variant at 50.
    res.episodes["ledger"] = (answer_episodes("baseline", {1: 50, 2: 50, 3: 12}, 50)
                              + answer_episodes("w4g128-a16-kv:16", {4: 50}, 50))
    assert res.failed_at_answer("ledger") == (3, 4)
    assert res.failed_at_answer("pointer_chase") == (0, 0)


def test_a_variant_with_the_baselines_outcomes_is_labelled_model_based_in_the_compounding_table():
    res = ModelResults("m", {"baseline": "baseline", "w8-a16-kv:16": "int8", "w4g128-a16-kv:16": "int4"})
    rows = []
    for h in (4, 16, 64):
        fails = {s: h for s in range(0, 30, 5 if h == 64 else 10)}  # failures and successes at every horizon
        other = {s + 1: h for s in fails}  # the same number of failures, on other seeds
        rows += (answer_episodes("baseline", fails, h) + answer_episodes("w8-a16-kv:16", fails, h)
                 + answer_episodes("w4g128-a16-kv:16", other, h))
    res.episodes["pointer_chase"] = rows
    lines = res.compounding_table("pointer_chase").splitlines()
    int8 = next(x for x in lines if x.startswith("| int8"))
    int4 = next(x for x in lines if x.startswith("| int4"))
    assert "model-based (same outcomes as the baseline)" in int8 and "| 0.500 |" in int8
    assert "cluster-robust" in int4


def test_a_p_value_of_exactly_zero_counts_as_significant(monkeypatch):
    # a normal or t tail underflows to 0.0 past about 38 SE; `(p or 1) < alpha` read that as 1
    res = ModelResults("m", {})
    res.episodes["pointer_chase"] = episodes("baseline", {}) + episodes("w4", {1: 3}) + episodes("w3", {2: 3})
    p = {"w4": 0.0, "w3": 0.01}
    monkeypatch.setattr(ModelResults, "interaction", lambda self, env, v: {"p_value": p[v]})
    assert sorted(res.significant_compounding("pointer_chase")) == ["w3", "w4"]


def test_each_short_form_row_counts_its_own_items():
    res = ModelResults("m", {"baseline": "baseline", "w4g64-a16-kv:16": "int4"})
    res.items["mmlu"] = items("baseline", 6, n=10) + items("w4g64-a16-kv:16", 2, n=4)
    table = res.short_form_table("mmlu")
    int4 = next(line for line in table.splitlines() if line.startswith("| int4"))
    assert int4.startswith("| int4 | 4 | 0.500 |")


def test_a_model_in_two_sweeps_keeps_both_sweeps_tasks_and_refuses_a_task_in_both():
    a, b = ModelResults("m", {}), ModelResults("m", {})
    a.episodes["pointer_chase"] = episodes("baseline", {})
    a.cells, b.cells = 1, 1
    b.episodes["ledger"] = episodes("baseline", {1: 2})
    a.merge(b, "a.yaml and b.yaml")
    assert sorted(a.episodes) == ["ledger", "pointer_chase"] and a.cells == 2
    c = ModelResults("m", {})
    c.episodes["ledger"] = episodes("baseline", {})
    with pytest.raises(ValueError, match="episodes rows for ledger in two sweeps .a.yaml and b.yaml"):
        a.merge(c, "a.yaml and b.yaml")


def drift(config: str, horizon: int, slope: float, seeds: int = 8) -> list[dict]:
    """Teacher-forced drift rows whose KL moves by `slope` a step within each episode, plus noise."""
    import random

    rng = random.Random(f"{config}/{horizon}")
    return [{"config": config, "horizon": horizon, "seed": s, "step": t, "kl": 1e-3 + slope * t + rng.gauss(0, 2e-5),
             "top1_agree": True, "base_logprob": -0.01, "var_logprob": -0.01}
            for s in range(seeds) for t in range(horizon + 1)]


def test_drift_growth_is_holm_adjusted_over_the_variants_and_split_by_horizon():
    configs = ["baseline", "w8-a16-kv:16", "w4g128-a16-kv:16", "w3g128-a16-kv:16"]
    res = ModelResults("m", {})
    res.episodes["pointer_chase"] = [r for c in configs for h in (1, 8, 32) for r in episodes(c, {}, horizon=h)]
    slopes = {"w8-a16-kv:16": (0.0, 0.0), "w4g128-a16-kv:16": (-2e-5, 2e-6), "w3g128-a16-kv:16": (0.0, 1e-6)}
    res.drift["pointer_chase"] = [r for c, (s8, s32) in slopes.items()
                                  for r in drift(c, 1, 0.0) + drift(c, 8, s8) + drift(c, 32, s32)]
    growth = res.drift_growth("pointer_chase")
    raw = {v: p for v, (p, _) in growth.items()}
    # Holm by hand: the i-th smallest of m p-values times (m - i), made monotone, capped at 1.
    order, m, running = sorted(raw, key=raw.get), len(raw), 0.0
    for i, v in enumerate(order):
        running = max(running, min(1.0, (m - i) * raw[v]))
        assert growth[v][1] == pytest.approx(running), v
    assert res.growing_drift("pointer_chase") == [v for v in order if growth[v][1] < 0.05 and v in slopes]
    grows, declines = res.drift_directions("pointer_chase", list(slopes))
    assert 1 not in grows and 1 not in declines  # one call and the answer: no trajectory to slope along
    assert grows == {32: ["w4g128-a16-kv:16", "w3g128-a16-kv:16"]}
    assert declines == {8: ["w4g128-a16-kv:16"]}
    table = res.drift_by_horizon_table("pointer_chase")
    assert table.splitlines()[0] == "| variant | L = 8 | L = 32 |"


def test_a_point_estimate_within_the_margin_is_not_called_equivalent_unless_its_interval_is():
    res = ModelResults("m", {})
    res.steps["pointer_chase"] = steps("baseline", 10, 6, 4) + steps("w4g64-a16-kv:16", 2, 1, 1)
    # One discordant item in 100: the paired differences are a single 1 among 99 zeros.
    res.items["mmlu"] = items("baseline", 30) + items("w4g64-a16-kv:16", 31)
    (b,) = res.short_form_blind("mmlu", "pointer_chase")
    d = [1.0] + [0.0] * 99
    mean = sum(d) / 100
    se = (sum((x - mean) ** 2 for x in d) / 99 / 100) ** 0.5
    assert b["ci"][0] < mean - 1.9 * se and b["ci"][1] > mean + 1.9 * se  # at least a normal 95% interval
    assert b["ci"][0] < 0 < 0.01 < b["ci"][1] and not b["equivalent"] and b["n"] == 100
    assert b["reach"] == pytest.approx(max(-b["ci"][0], b["ci"][1]))


def test_items_of_a_group_task_are_tabled_by_their_own_subtask(tmp_path):
    # lm-eval runs a group task's subtasks in one cell; doc_ids repeat across subtasks, so the items
    # must be paired per subtask (the row's own task), not pooled under the cell's task.
    from qdrift.store import Store

    def rows(spec, wrong):
        return [{"task": sub, "filter": "none", "doc_id": i, "correct": i not in wrong, "answer": "A", "pred": 0,
                 "gold": 0, "spec": spec, "model": "m", "item": f"{sub}/{i}", "output_type": "multiple_choice",
                 "choice_logprob": [-0.1, -2.0], "gold_logprob": -0.1} for sub in ("grp_a", "grp_b") for i in range(20)]

    with Store(tmp_path / "s.sqlite") as s:
        for key, spec, wrong in (("kb", "baseline", set()), ("kv", "w8-a16-kv:16", {1})):
            s.record_done(key, {"model": "m", "config": spec, "spec": spec, "spec_hash": None, "kind": "short_form",
                                "task": "grp"}, {"item": rows("w16-a16-kv:16" if spec == "baseline" else spec, wrong)},
                          1.0, 2.0)
        res = ModelResults.from_store(s, "m", {"baseline": "base", "w8-a16-kv:16": "w8"}, {"kb", "kv"})
    assert {k: len(v) for k, v in res.items.items()} == {"grp_a": 40, "grp_b": 40}
    assert {r["config"] for r in res.items["grp_a"]} == {"baseline", "w8-a16-kv:16"}
    for sub in ("grp_a", "grp_b"):
        result, err = res.short_form(sub, "w8-a16-kv:16")
        assert result is not None, err
        assert res.accuracy(sub, "w8-a16-kv:16") == (19 / 20, 20)
