"""Growth of teacher-forced divergence along the trajectory."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from qdrift.stats import drift_trend


def rows(kl_slope=0.0, flip_slope=0.0, n_eps=60, steps=40, tokens=6, seed=0):
    """Drift rows with mean KL 0.02 + kl_slope * step/100 and flip log-odds -3 + flip_slope * step/100."""
    rng = np.random.default_rng(seed)
    ep = np.repeat(np.arange(n_eps), steps * tokens)
    step = np.tile(np.repeat(np.arange(steps), tokens), n_eps)
    scale = rng.gamma(4.0, 0.25, n_eps)  # episodes differ, so clustering matters
    episode_scale = (scale / scale.mean())[ep]  # mean 1: the slope is kl_slope in this sample too
    kl = rng.exponential((0.02 + kl_slope * step / 100) * episode_scale)
    p_flip = 1 / (1 + np.exp(-(-3 + flip_slope * step / 100)))
    return pd.DataFrame({"episode": ep, "step": step, "token_index": np.tile(np.arange(tokens), n_eps * steps),
                         "kl": kl, "top1_agree": rng.random(kl.size) >= p_flip,
                         "base_logprob": -0.1, "var_logprob": -0.1 - kl})


def within_reference(y, x, groups):
    """The within-episode slope and its CR1 cluster-robust SE written out: remove each episode's means,
    b = sum(x y) / sum(x^2), V = G/(G-1) (N-1)/(N-1) sum_g (sum_i x_i u_i)^2 / (sum x^2)^2."""
    y, x = y.astype(float).copy(), x.astype(float).copy()
    for g in np.unique(groups):
        y[groups == g] -= y[groups == g].mean()
        x[groups == g] -= x[groups == g].mean()
    b = (x * y).sum() / (x * x).sum()
    u = y - b * x
    meat = sum(((x * u)[groups == g].sum()) ** 2 for g in np.unique(groups))
    G = len(np.unique(groups))
    return b, np.sqrt(G / (G - 1) * meat) / (x * x).sum()


def test_kl_slope_and_se_match_the_written_out_within_estimator():
    df = rows(kl_slope=0.05)
    kl = drift_trend(df).row(quantity="KL slope (nats per 100 steps)")
    slope, se = within_reference(df["kl"].to_numpy(), df["step"].to_numpy() / 100, df["episode"].to_numpy())
    assert kl["estimate"] == pytest.approx(slope, rel=1e-9)
    assert kl["se"] == pytest.approx(se, rel=1e-9)


def test_the_kl_slope_equals_one_dummy_per_episode():
    import statsmodels.api as sm

    df = rows(kl_slope=0.05, n_eps=12, steps=10)
    dummies = pd.get_dummies(df["episode"], dtype=float).to_numpy()
    lsdv = sm.OLS(df["kl"].to_numpy(), np.column_stack([df["step"].to_numpy() / 100, dummies])).fit()
    assert drift_trend(df).row(quantity="KL slope (nats per 100 steps)")["estimate"] == pytest.approx(lsdv.params[0])


def test_levels_that_differ_by_horizon_make_no_slope():
    # Short episodes sit at a low KL level and long ones at a high one, flat within each episode: a
    # pooled regression would call that growth; each episode compared with itself shows none.
    rng = np.random.default_rng(1)
    parts = []
    for e in range(40):
        steps = 4 if e % 2 else 100
        kl = (0.001 if steps == 4 else 0.01) * rng.exponential(1.0, steps)
        parts.append(pd.DataFrame({"episode": e, "step": np.arange(steps), "kl": kl, "top1_agree": True,
                                   "base_logprob": -0.1, "var_logprob": -0.1 - kl}))
    kl = drift_trend(pd.concat(parts)).row(quantity="KL slope (nats per 100 steps)")
    assert kl["ci_low"] < 0 < kl["ci_high"]


def test_growth_is_found_and_recovered():
    result = drift_trend(rows(kl_slope=0.05, flip_slope=2.0))
    kl = result.row(quantity="KL slope (nats per 100 steps)")
    flip = result.row(quantity="flip log-odds slope (per 100 steps)")
    # the truth within 3 standard errors, and growth detected
    assert abs(kl["estimate"] - 0.05) < 3 * kl["se"] and kl["p_growth"] < 1e-3
    assert abs(flip["estimate"] - 2.0) < 3 * flip["se"] and flip["p_growth"] < 1e-3
    assert result.n == {"tokens": 60 * 40 * 6, "episodes": 60, "steps": 40}


def test_a_flat_profile_shows_no_growth():
    result = drift_trend(rows(seed=3))
    kl = result.row(quantity="KL slope (nats per 100 steps)")
    assert kl["ci_low"] < 0 < kl["ci_high"] and kl["p_growth"] > 0.05


def test_identical_models_are_reported_not_tested():
    df = rows().assign(kl=0.0, top1_agree=True)
    result = drift_trend(df)
    assert result.row(quantity="flip log-odds slope (per 100 steps)")["estimate"] is None
    assert any("no flips" in n for n in result.notes)
    assert any("identical models" in n for n in result.notes)


def test_a_few_flips_get_no_slope():
    df = rows()
    df["top1_agree"] = True
    df.loc[df.index[:9], "top1_agree"] = False  # 9 flips, all in episode 0
    result = drift_trend(df)
    assert result.row(quantity="flip log-odds slope (per 100 steps)")["estimate"] is None
    assert any("9 flips in 1 episode(s): too few" in n for n in result.notes)


@pytest.mark.parametrize("change, message", [
    (lambda d: d[d["episode"] == 0], "at least 2 episodes"),
    (lambda d: d[d["step"] == 5], "at least 2 distinct steps, got only step 5"),
    (lambda d: d.drop(columns="kl"), "lack columns"),
    (lambda d: d.assign(episode=d["step"]), "an episode with at least 2 distinct steps"),
])
def test_bad_rows_are_named(change, message):
    with pytest.raises(ValueError, match=message):
        drift_trend(change(rows(n_eps=4, steps=8)))


def test_single_step_episodes_do_not_count_as_clusters_of_the_kl_slope():
    # They are all zeros after the within transform: they change neither the slope nor the sandwich,
    # so adding them must not shrink the SE (via G/(G-1)) or widen t's degrees of freedom.
    df = rows(kl_slope=0.05, n_eps=3, steps=10)
    singles = rows(n_eps=30, steps=1, seed=3).assign(episode=lambda d: d["episode"] + 100, step=4)
    alone = drift_trend(df).row(quantity="KL slope (nats per 100 steps)")
    both = drift_trend(pd.concat([df, singles]))
    kl = both.row(quantity="KL slope (nats per 100 steps)")
    for key in ("estimate", "se", "ci_low", "ci_high", "p_growth"):
        assert kl[key] == pytest.approx(alone[key], rel=1e-9), key
    assert "t(2)" in kl["detail"] and any("30 episode(s) with a single step" in n for n in both.notes)


def test_the_flip_slope_uses_t_with_clusters_minus_one_degrees_of_freedom():
    import statsmodels.api as sm
    from scipy import stats

    df = rows(flip_slope=1.0, n_eps=6, steps=30)
    flip = drift_trend(df).row(quantity="flip log-odds slope (per 100 steps)")
    exog = sm.add_constant(df["step"].to_numpy() / 100)
    ref = sm.GLM((~df["top1_agree"]).astype(float).to_numpy(), exog, family=sm.families.Binomial()).fit(
        cov_type="cluster", cov_kwds={"groups": df["episode"].to_numpy()})
    slope, se = ref.params[1], ref.bse[1]
    assert flip["p_growth"] == pytest.approx(stats.t.sf(slope / se, 5))
    assert flip["ci_high"] == pytest.approx(slope + stats.t.ppf(0.975, 5) * se)


@pytest.mark.parametrize("col", ["top1_agree", "var_logprob"])
def test_a_missing_value_in_any_drift_column_is_named_not_a_crash_or_a_silent_nan(col):
    from qdrift.stats import divergence_summary

    df = rows(n_eps=4, steps=5).astype({col: object})
    df.loc[3, col] = None
    for analysis in (drift_trend, divergence_summary):
        with pytest.raises(ValueError, match=f"1 missing \\(NaN\\) '{col}' values"):
            analysis(df)
