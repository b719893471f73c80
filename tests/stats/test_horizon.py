"""Success vs horizon, the 50% horizon and the per-step error ratio recover planted truths."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from qdrift.stats.horizon import _batched_fit, _cells, half_horizon, step_error_ratio, success_by_horizon
from qdrift.stats.rows import cluster_ids, episode_frame

matplotlib.use("Agg")

HORIZONS = (4, 8, 16, 32, 64, 128)


def geometric(rng, p_by_config, seeds=80, trials=2, horizons=HORIZONS) -> pd.DataFrame:
    """Episodes whose first error is geometric(p) per step; an episode of horizon L succeeds if none by L."""
    rows = []
    for c, p in p_by_config.items():
        for h in horizons:
            first = rng.geometric(p, (seeds, trials)) - 1
            for s in range(seeds):
                for t in range(trials):
                    f = int(first[s, t])
                    err = f < h
                    rows.append({"episode": len(rows), "env": "ledger", "horizon": h, "seed": s, "trial": t,
                                 "success": not err, "steps": h, "first_error_step": f if err else None,
                                 "stop_reason": "done", "config": c})
    return pd.DataFrame(rows)


def l50(p: float) -> float:
    return math.log(0.5) / math.log(1 - p)


def test_success_by_horizon_wilson_and_plot():
    df = geometric(np.random.default_rng(1), {"baseline": 0.02, "w4g128": 0.05}, seeds=30)
    res = success_by_horizon(df)
    row = res.row(config="w4g128", horizon=16)
    assert row["n"] == 60 and row["rate"] == row["successes"] / 60
    assert row["ci"][0] < row["rate"] < row["ci"][1]
    assert [r["config"] for r in res.rows][:6] == ["baseline"] * 6  # first-seen order
    ax = res.plot()
    assert len(ax.get_lines()) == 2 and ax.get_xscale() == "log"


def test_success_by_horizon_all_successes_is_defined():
    df = geometric(np.random.default_rng(2), {"baseline": 1e-12}, seeds=5, horizons=(4, 8))
    res = success_by_horizon(df)
    assert all(r["rate"] == 1.0 and r["ci"][0] < 1.0 for r in res.rows) and "succeeded" in res.notes[0]


def test_half_horizon_recovers_planted_geometric_l50_and_ratio():
    p_b, p_v = 0.02, 0.05
    df = geometric(np.random.default_rng(3), {"baseline": p_b, "w4g128": p_v})
    res = half_horizon(df, n_boot=500, seed=1)
    for c, p in (("baseline", p_b), ("w4g128", p_v)):
        r = res.row(quantity="L50", config=c)
        print(f"L50 {c}: {r['estimate']:.2f} {r['ci']} planted {l50(p):.2f}")
        assert r["ci"][0] <= l50(p) <= r["ci"][1]
    ratio = res.row(quantity="L50 ratio")
    assert ratio["ci"][0] <= l50(p_v) / l50(p_b) <= ratio["ci"][1]


def test_half_horizon_bootstrap_interval_coverage():
    # Coverage of the planted L50 over 60 datasets (batched fits keep this cheap).
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(60):
        df = geometric(rng, {"baseline": 0.03}, seeds=40, trials=1)
        r = half_horizon(df, n_boot=200, seed=int(rng.integers(1 << 30))).rows[0]
        hits += r["ci"][0] <= l50(0.03) <= r["ci"][1]
    print(f"L50 95% bootstrap coverage over 60 datasets: {hits / 60:.2f}")
    assert hits / 60 >= 0.85


@pytest.mark.parametrize("model", ["logistic", "cloglog"])
def test_batched_fit_matches_statsmodels(model):
    df = geometric(np.random.default_rng(5), {"baseline": 0.03}, seeds=30)
    f = episode_frame(df)
    codes, g = cluster_ids(f)
    x, s, n = _cells(f, "config", ["baseline"], codes, g)
    s, n = s.sum(0), n.sum(0)
    if model == "logistic":
        fam, endog, link = sm.families.Binomial(), np.column_stack([s, n - s]), "logit"
    else:
        fam, endog, link = sm.families.Binomial(sm.families.links.CLogLog()), np.column_stack([n - s, s]), "cloglog"
    ref = sm.GLM(endog, sm.add_constant(np.log(x)), family=fam).fit().params
    a, b = _batched_fit(np.log(x), s, n, link)
    assert np.allclose([a[0], b[0]], ref, atol=1e-7)


def test_half_horizon_models_and_extrapolation_flag():
    df = geometric(np.random.default_rng(6), {"baseline": 0.002, "w4g128": 0.03}, seeds=40)
    emp = half_horizon(df, n_boot=100, model="empirical")
    assert emp.row(quantity="L50", config="baseline")["estimate"] == math.inf  # never below 50% by L = 128
    cl = half_horizon(df, n_boot=100)
    b = cl.row(quantity="L50", config="baseline")
    assert b["extrapolated"] and 150 < b["estimate"] < 1500
    lg = half_horizon(df, n_boot=100, model="logistic")
    assert lg.row(quantity="L50", config="w4g128")["ci"][0] < l50(0.03) * 1.3


def test_half_horizon_all_successes_is_inf_with_note():
    df = geometric(np.random.default_rng(7), {"baseline": 0.03, "w4g128": 1e-12}, seeds=20)
    res = half_horizon(df, n_boot=50)
    assert res.row(quantity="L50", config="w4g128")["estimate"] == math.inf
    assert res.row(quantity="L50 ratio")["estimate"] == math.inf
    assert any("separated" in n for n in res.notes)


def test_half_horizon_ratio_of_two_zero_l50_is_undefined_not_inf():
    df = geometric(np.random.default_rng(8), {"baseline": 0.999999, "w4g128": 0.999999}, seeds=10,
                   horizons=(1, 4))
    assert not df["success"].any()  # every episode fails at its first step
    res = half_horizon(df, n_boot=50)
    assert res.row(quantity="L50", config="baseline")["estimate"] == 0.0
    ratio = res.row(quantity="L50 ratio")
    assert math.isnan(ratio["estimate"]) and all(math.isnan(v) for v in ratio["ci"])
    assert any("both L50 are 0" in n for n in res.notes)
    assert any("50/50 bootstrap ratios are undefined" in n for n in res.notes)


def test_step_error_ratio_recovers_planted_ratio():
    df = geometric(np.random.default_rng(8), {"baseline": 0.02, "w4g128": 0.05})
    res = step_error_ratio(df)
    ratio = res.row(quantity="p_step ratio")
    assert ratio["ci"][0] <= 2.5 <= ratio["ci"][1]
    p = res.row(quantity="p_step", config="baseline")
    assert p["ci"][0] <= 0.02 <= p["ci"][1] and p["estimate"] == p["errors"] / p["steps_at_risk"]


def test_step_error_ratio_zero_errors_uses_exact_interval():
    df = geometric(np.random.default_rng(9), {"baseline": 0.02, "w4g128": 1e-12}, seeds=20)
    res = step_error_ratio(df)
    assert res.row(quantity="p_step", config="w4g128")["estimate"] == 0.0
    r = res.row(quantity="p_step ratio")
    assert r["estimate"] == 0.0 and r["ci"][0] == 0.0 and 0 < r["ci"][1] < 0.2
    assert any("exact" in n for n in res.notes)


def test_errors_in_a_single_cluster_get_the_exact_poisson_interval_not_a_sandwich_of_one():
    from scipy.stats import chi2

    df = geometric(np.random.default_rng(12), {"baseline": 0.02, "w4g128": 1e-12}, seeds=20)
    one = df.index[(df["config"] == "w4g128") & (df["seed"] == 3)][0]
    df.loc[one, ["success", "first_error_step"]] = [False, 2]  # one error, in seed 3
    res = step_error_ratio(df)
    p = res.row(quantity="p_step", config="w4g128")
    r = p["steps_at_risk"]
    assert p["errors"] == 1
    # Garwood's exact interval for one Poisson count, written out with chi-square quantiles.
    assert p["ci"] == pytest.approx((chi2.ppf(0.025, 2) / 2 / r, chi2.ppf(0.975, 4) / 2 / r))
    ratio = res.row(quantity="p_step ratio")
    e0, r0 = res.row(quantity="p_step", config="baseline")["errors"], res.row(quantity="p_step", config="baseline")["steps_at_risk"]
    lo, hi = stats_beta_ci(1, 1 + e0)  # exact conditional: 1 of the 1 + e0 errors is the variant's
    assert ratio["ci"] == pytest.approx((lo / (1 - lo) * r0 / r, hi / (1 - hi) * r0 / r))
    assert any("fall in one cluster" in n for n in res.notes)


def test_step_error_ratio_of_identical_configs_is_one_with_an_exact_interval_not_zero_width():
    df = geometric(np.random.default_rng(11), {"baseline": 0.02}, seeds=20)
    twin = df.assign(config="w8")  # the same first errors in the same seeds
    res = step_error_ratio(pd.concat([df, twin]))
    r = res.row(quantity="p_step ratio")
    e = int(df["first_error_step"].notna().sum())
    # The exact conditional interval for equal counts: Clopper-Pearson on e of 2e, mapped to a ratio.
    lo, hi = stats_beta_ci(e, 2 * e)
    assert r["estimate"] == pytest.approx(1.0)
    assert r["ci"][0] == pytest.approx(lo / (1 - lo)) and r["ci"][1] == pytest.approx(hi / (1 - hi))
    assert r["ci"][0] < 0.9 and r["ci"][1] > 1.1  # not the zero-width [1, 1]
    assert any("variance of the ratio is 0" in n for n in res.notes)


def stats_beta_ci(k: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    from scipy.stats import beta

    return beta.ppf(alpha / 2, k, n - k + 1), beta.ppf(1 - alpha / 2, k + 1, n - k)


def test_bad_inputs():
    df = geometric(np.random.default_rng(10), {"baseline": 0.02}, seeds=3, horizons=(8,))
    with pytest.raises(ValueError, match="at least 2 distinct horizons"):
        half_horizon(df)
    with pytest.raises(ValueError, match="model must be"):
        half_horizon(df, model="spline")
    one = geometric(np.random.default_rng(10), {"baseline": 0.02}, seeds=1, trials=3)
    with pytest.raises(ValueError, match="only 1 cluster"):
        half_horizon(one)
    with pytest.raises(ValueError, match="config 'w4' has no rows"):
        step_error_ratio(df, baseline="w4")


def test_step_error_ratio_rows_name_variant_and_baseline_even_when_a_spec_holds_a_slash():
    phased = "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit"
    df = geometric(np.random.default_rng(12), {"baseline": 0.02, phased: 0.04}, seeds=10)
    r = step_error_ratio(df).row(quantity="p_step ratio")
    assert (r["variant"], r["baseline"]) == (phased, "baseline")


def test_empirical_l50_skips_a_horizon_a_config_was_not_run_at():
    # baseline at L = 4, 8, 16, 32; the variant at 4, 16, 32 only: its curve runs 0.75 (L=4) -> 0.30
    # (L=16), crossing 0.5 at 4 * 4^((0.75 - 0.5) / (0.75 - 0.30)) in log L; before, the missing L=8
    # made it nan and its interval came from the replicates that happened to skip the gap.
    def episodes(config, horizon, rate, n=20):
        k = round(rate * n)
        return [{"episode": f"{config}{horizon}-{i}", "env": "ledger", "horizon": horizon, "seed": i, "trial": 0,
                 "success": i < k, "steps": horizon, "first_error_step": None, "stop_reason": "done",
                 "config": config} for i in range(n)]

    rows = [r for h, p in ((4, 0.9), (8, 0.85), (16, 0.8), (32, 0.7)) for r in episodes("baseline", h, p)]
    rows += [r for h, p in ((4, 0.75), (16, 0.30), (32, 0.1)) for r in episodes("w4", h, p)]
    res = half_horizon(rows, n_boot=200, model="empirical")
    w4 = res.row(quantity="L50", config="w4")
    assert w4["estimate"] == pytest.approx(4 * 4 ** (0.25 / 0.45))
    assert all(math.isfinite(v) for v in w4["ci"])


def test_success_intervals_widen_for_repeated_trials_of_an_instance():
    # 8 instances x 10 trials, instances differing (beta(2, 2) success rates, mean 0.5): treated as 80
    # independent episodes the 95% interval covered 0.5 in 76% of datasets (90% with the design effect).
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(300):
        p_i = rng.beta(2, 2, size=8)
        rows = [{"config": "baseline", "horizon": 4, "env": "e", "seed": i, "trial": t,
                 "success": bool(rng.random() < p_i[i]), "steps": 4, "first_error_step": None, "stop_reason": "done"}
                for i in range(8) for t in range(10)]
        lo, hi = success_by_horizon(rows).rows[0]["ci"]
        hits += lo <= 0.5 <= hi
    assert hits / 300 >= 0.87


def test_one_episode_per_instance_keeps_the_plain_wilson_interval():
    from statsmodels.stats.proportion import proportion_confint

    rows = [{"config": "baseline", "horizon": 4, "env": "e", "seed": i, "trial": 0, "success": i % 3 > 0, "steps": 4,
             "first_error_step": None, "stop_reason": "done"} for i in range(30)]
    row = success_by_horizon(rows).rows[0]
    assert row["design_effect"] == 1.0 and row["ci"] == pytest.approx(proportion_confint(20, 30, method="wilson"))
