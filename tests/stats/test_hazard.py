"""First-error hazard: published survival answers, calibration of the constant-hazard LRT, power, edges."""

from __future__ import annotations

import math

import matplotlib
import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy.stats import norm

from qdrift.stats.hazard import cox, hazard_lrt, hazard_test, kaplan_meier, logrank
from qdrift.stats.rows import count_at_risk, episode_frame, person_period

matplotlib.use("Agg")

# Freireich et al. (1963) 6-MP vs placebo remission times in weeks, as tabulated by Gehan (1965)
# and used throughout Kleinbaum & Klein, "Survival Analysis: A Self-Learning Text" (ch. 2-3).
# "+" = censored. Published: log-rank chi-square 16.79 (p = 4.2e-5); Cox coefficient for placebo
# vs 6-MP 1.572 (SE 0.412, HR 4.82) with Efron ties (R coxph) and 1.509 (SE 0.410, HR 4.52) with
# Breslow ties (SAS PHREG / Stata); KM medians 23 weeks (6-MP) and 8 weeks (placebo).
SIX_MP = "6 6 6 6+ 7 9+ 10 10+ 11+ 13 16 17+ 19+ 20+ 22 23 25+ 32+ 32+ 34+ 35+".split()
PLACEBO = "1 1 2 2 3 4 4 5 5 8 8 8 8 11 11 12 12 15 17 22 23".split()


def leukemia() -> pd.DataFrame:
    """The data as episode rows: an event at week t is a first error at 0-based step t - 1."""
    rows = []
    for config, times in (("6-MP", SIX_MP), ("placebo", PLACEBO)):
        for i, t in enumerate(times):
            cens = t.endswith("+")
            w = int(t.rstrip("+"))
            rows.append({"episode": len(rows), "env": "leukemia", "horizon": 35, "seed": len(rows), "trial": 0,
                         "success": cens, "steps": w, "first_error_step": None if cens else w - 1,
                         "stop_reason": "done", "arm": config, "i": i})
    return pd.DataFrame(rows)


def test_logrank_reproduces_gehan_leukemia():
    res = logrank(leukemia(), config_col="arm")
    row = res.rows[0]
    assert row["chisq"] == pytest.approx(16.79, abs=0.01)
    assert row["p_value"] == pytest.approx(4.17e-5, rel=0.02) and row["df"] == 1


@pytest.mark.parametrize("ties, coef, se", [("efron", 1.572, 0.412), ("breslow", 1.509, 0.410)])
def test_cox_reproduces_published_leukemia_fit(ties, coef, se):
    res = cox(leukemia(), config_col="arm", baseline="6-MP", ties=ties)
    row = res.row(arm="placebo")
    assert row["coef"] == pytest.approx(coef, abs=0.001)
    assert row["se"] == pytest.approx(se, abs=0.001)
    assert row["hazard_ratio"] == pytest.approx(math.exp(coef), rel=0.002)
    assert row["ci"][0] < row["hazard_ratio"] < row["ci"][1]


def test_cox_robust_errors_with_clusters():
    res = cox(leukemia(), config_col="arm", baseline="6-MP", cluster=("env", "seed"))
    assert res.row(arm="placebo")["coef"] == pytest.approx(1.572, abs=0.001) and "robust" in res.method


def test_kaplan_meier_medians_and_frequency_weighting():
    res = kaplan_meier(leukemia(), config_col="arm")
    assert res.row(arm="6-MP")["median_steps"] == 23 and res.row(arm="placebo")["median_steps"] == 8
    from statsmodels.duration.survfunc import SurvfuncRight

    d = leukemia()[lambda x: x.arm == "6-MP"]
    ref = SurvfuncRight(d["steps"], d["first_error_step"].notna().astype(int))
    cur = res.extra["curves"]["6-MP"]
    assert np.allclose(cur["surv"], ref.surv_prob) and np.allclose(cur["time"], ref.surv_times)
    assert np.allclose(cur["se"], ref.surv_prob_se)
    assert np.all(cur["lo"] <= cur["surv"] + 1e-12) and np.all(cur["surv"] <= cur["hi"] + 1e-12)
    ax = res.plot()
    assert len(ax.get_lines()) == 2


def failing_at(times, censored_at=None) -> pd.DataFrame:
    """Episodes failing at the given 1-based times, plus ones without an error censored at `censored_at`."""
    rows = [{"steps": t, "first_error_step": t - 1} for t in times]
    rows += [{"steps": t, "first_error_step": None} for t in (censored_at or [])]
    return pd.DataFrame([{"episode": i, "env": "e", "horizon": 50, "seed": i, "trial": 0, "stop_reason": "done",
                          "success": r["first_error_step"] is None, "config": "c", **r} for i, r in enumerate(rows)])


def test_kaplan_meier_median_at_exactly_one_half_follows_r_survival():
    # Uncensored, the median is the sample median (R's quantile.survfit: "mirrors the standard
    # behavior of the median when data is uncensored"); with ten episodes survival is exactly 0.5
    # from step 5 to 6, which statsmodels' strict-inequality quantile skips (it says 6).
    for times in ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [2, 2, 3, 7, 9, 9], [3, 4, 4, 8, 11]):
        med = kaplan_meier(failing_at(times)).row(config="c")["median_steps"]
        assert med == float(np.median(times)), times
    # Flat at 0.5 to the end of follow-up: the midpoint to the last observed time (R's rule), not inf.
    res = kaplan_meier(failing_at([2] * 5, censored_at=[4] * 5))
    assert res.row(config="c")["median_steps"] == 3.0 and not res.notes


def geometric_counts(rng, p_by_config, n_per, horizon):
    """(events, at_risk, config, step) cells of geometric first errors censored at `horizon`."""
    ev, ar, cf, st = [], [], [], []
    for c, p in enumerate(p_by_config):
        first = rng.geometric(p, n_per) - 1
        err = first < horizon
        a, e = count_at_risk(np.where(err, first + 1, horizon), err)
        ev.append(e), ar.append(a), cf.append(np.full(len(a), c)), st.append(np.arange(len(a)))
    return np.concatenate(ev), np.concatenate(ar), np.concatenate(cf), np.concatenate(st)


def test_constant_hazard_is_rejected_at_the_nominal_rate():
    rng = np.random.default_rng(21)
    d = 1000
    rej_two = rej_one = 0
    for _ in range(d):
        e, r, c, s = geometric_counts(rng, [0.05, 0.09], 150, 30)
        out = hazard_lrt(e, r, c, s, alternative="two-sided")
        rej_two += out["p"] < 0.05
        rej_one += norm.sf(math.copysign(math.sqrt(out["lr"]), out["slope"][0])) < 0.05
    print(f"hazard LRT type-I over {d} geometric datasets: two-sided {rej_two / d:.3f}, one-sided {rej_one / d:.3f}")
    assert 0.03 <= rej_two / d <= 0.07 and 0.03 <= rej_one / d <= 0.07


def test_self_conditioning_is_detected_with_high_power():
    rng = np.random.default_rng(22)
    d, n, horizon = 200, 150, 30
    steps = np.arange(horizon)
    haz = 1 / (1 + np.exp(-(np.log(0.02 / 0.98) + 0.6 * np.log1p(steps))))  # rises ~6x over 30 steps
    rej = 0
    for _ in range(d):
        ev, ar, cf, st = [], [], [], []
        for c, scale in enumerate([1.0, 1.5]):
            err_at = rng.random((n, horizon)) < np.clip(haz * scale, 0, 1)
            has = err_at.any(1)
            first = np.where(has, err_at.argmax(1), horizon)
            a, e = count_at_risk(np.where(has, first + 1, horizon), has)
            ev.append(e), ar.append(a), cf.append(np.full(len(a), c)), st.append(np.arange(len(a)))
        out = hazard_lrt(*(np.concatenate(v) for v in (ev, ar, cf, st)))
        rej += out["p"] < 0.05
    print(f"hazard LRT power on self-conditioning data ({d} datasets): {rej / d:.3f}")
    assert rej / d >= 0.9


def episodes(rng, p_by_config, n_per=120, horizons=(8, 16, 32)):
    rows = []
    for c, p in p_by_config.items():
        for h in horizons:
            first = rng.geometric(p, n_per) - 1
            for i, f in enumerate(first):
                err = f < h
                rows.append({"episode": len(rows), "env": "ledger", "horizon": h, "seed": i, "trial": 0,
                             "success": not err, "steps": h, "first_error_step": int(f) if err else None,
                             "stop_reason": "done", "config": c})
    return pd.DataFrame(rows)


def test_hazard_test_matches_person_period_glm():
    df = episodes(np.random.default_rng(23), {"baseline": 0.04, "w4g128": 0.07})
    res = hazard_test(df, interaction=True)
    pp = person_period(episode_frame(df))
    cfg = df["config"].to_numpy()[pp["row"]]
    d = np.column_stack([(cfg == c).astype(float) for c in ("baseline", "w4g128")])
    f = np.log1p(pp["step"].to_numpy())
    y = pp["event"].astype(float).to_numpy()
    m0 = sm.GLM(y, d, family=sm.families.Binomial()).fit()
    m1 = sm.GLM(y, np.column_stack([d, d * f[:, None]]), family=sm.families.Binomial()).fit()
    last = res.rows[-1]
    assert last["statistic"] == pytest.approx(2 * (m1.llf - m0.llf), rel=1e-6) and last["df"] == 2
    p = res.row(quantity="p_step", config="w4g128")
    assert p["estimate"] == pytest.approx(0.07, abs=0.015) and p["ci"][0] < p["estimate"] < p["ci"][1]
    ax = res.plot()
    assert len(ax.get_lines()) == 4


def test_hazard_test_common_slope_on_rows_is_one_sided():
    df = episodes(np.random.default_rng(24), {"baseline": 0.04, "w4g128": 0.07})
    res = hazard_test(df, step_scale="linear")
    last = res.rows[-1]
    assert last["df"] == 1 and 0 <= last["p_value"] <= 1 and "one-sided" in res.notes[-1]
    two = hazard_test(df, step_scale="linear", alternative="two-sided").rows[-1]["p_value"]
    one = last["p_value"]
    assert one == pytest.approx(two / 2 if last["estimate"] > 0 else 1 - two / 2, rel=1e-6)


def test_no_errors_at_all_gives_defined_answers():
    df = episodes(np.random.default_rng(25), {"baseline": 1e-12, "w4g128": 1e-12}, n_per=10)
    assert df["first_error_step"].isna().all()
    h = hazard_test(df)
    assert h.rows[-1]["p_value"] == 1.0 and any("not identifiable" in n for n in h.notes)
    assert logrank(df).rows[0]["p_value"] == 1.0
    km = kaplan_meier(df)
    assert km.row(config="baseline")["median_steps"] == math.inf
    c = cox(df)
    assert math.isnan(c.rows[0]["hazard_ratio"]) and any("undefined" in n for n in c.notes)


def test_variant_without_errors_has_zero_hazard_ratio():
    rng = np.random.default_rng(26)
    df = episodes(rng, {"baseline": 0.05, "w4g128": 1e-12}, n_per=30)
    c = cox(df, baseline="baseline")
    assert c.row(config="w4g128")["hazard_ratio"] == 0.0 and c.row(config="w4g128")["ci"] == (0.0, math.inf)


def test_bad_inputs():
    df = episodes(np.random.default_rng(27), {"baseline": 0.05}, n_per=5)
    with pytest.raises(ValueError, match="compares >= 2 configs"):
        logrank(df)
    with pytest.raises(ValueError, match="config 'w8' has no rows.*valid configs"):
        hazard_test(df, configs=["baseline", "w8"])
    with pytest.raises(ValueError, match="missing column.*first_error_step"):
        kaplan_meier(df.drop(columns="first_error_step"))
    with pytest.raises(ValueError, match="step_scale"):
        hazard_test(df, step_scale="cubic")
    with pytest.raises(ValueError, match="no other config"):
        cox(df)
