"""The compounding (config x horizon interaction) test: calibration under the null, power, edge cases."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from qdrift.stats.compounding import compounding_test, firth_logit, interaction_fit

HORIZONS = np.array([4, 8, 16, 32, 64])
N_INST = 40


def frame(success: np.ndarray, horizons=HORIZONS, configs=("baseline", "w4g128")) -> pd.DataFrame:
    """Tidy rows from a (instance, config, horizon) success array, one episode per cell."""
    i, c, h = np.meshgrid(np.arange(success.shape[0]), np.arange(len(configs)), np.arange(len(horizons)),
                          indexing="ij")
    i, c, h = i.ravel(), c.ravel(), h.ravel()
    return pd.DataFrame({"episode": np.arange(len(i)), "env": "ledger", "horizon": horizons[h], "seed": i,
                         "trial": 0, "success": success.ravel().astype(bool), "steps": horizons[h],
                         "first_error_step": None, "stop_reason": "done", "config": np.asarray(configs)[c]})


def rejection_rate(success: np.ndarray, alternative: str) -> tuple[float, int]:
    """Fit every simulated dataset (datasets, instance, config, horizon) through the array entry point."""
    d, n_inst, _, k = success.shape
    inst, var, hor = np.meshgrid(np.arange(n_inst), [0.0, 1.0], np.arange(k), indexing="ij")
    h = np.log(HORIZONS[hor.ravel()]) - np.log(HORIZONS).mean()
    rej = firth = 0
    for r in range(d):
        fit = interaction_fit(var.ravel(), h, success[r].ravel().astype(float), np.ones(h.size),
                              groups=inst.ravel(), alternative=alternative)
        rej += fit["p_interaction"] < 0.05
        firth += fit["firth"]
    return rej / d, firth


def test_type_one_error_geometric_same_p_with_instance_heterogeneity():
    # Null: both configs share each instance's per-step error p_i, success = (1 - p_i)^L.
    rng = np.random.default_rng(11)
    d = 1000
    p_i = rng.beta(2, 60, size=(d, N_INST, 1, 1))  # instances differ: clustering matters
    prob = (1 - p_i) ** HORIZONS
    success = rng.random((d, N_INST, 2, len(HORIZONS))) < prob
    rate, firth = rejection_rate(success, "two-sided")
    print(f"type-I (two-sided, geometric null, {d} datasets): {rate:.3f}, firth fallbacks {firth}")
    assert 0.03 <= rate <= 0.07


def test_type_one_error_constant_logit_offset():
    # Null: the variant is worse by a constant -0.7 on the logit scale at every L (no compounding).
    rng = np.random.default_rng(12)
    d = 1000
    h = np.log(HORIZONS) - np.log(HORIZONS).mean()
    eta = 0.8 - 0.9 * h + np.array([0.0, -0.7])[:, None]
    success = rng.random((d, N_INST, 2, len(HORIZONS))) < 1 / (1 + np.exp(-eta))
    rate, _ = rejection_rate(success, "less")
    print(f"type-I (one-sided, logit-offset null, {d} datasets): {rate:.3f}")
    assert 0.03 <= rate <= 0.07


def _pvalues(success: np.ndarray) -> np.ndarray:
    d, n_inst, _, k = success.shape
    inst, var, hor = np.meshgrid(np.arange(n_inst), [0.0, 1.0], np.arange(k), indexing="ij")
    h = np.log(HORIZONS[hor.ravel()]) - np.log(HORIZONS).mean()
    return np.array([interaction_fit(var.ravel(), h, success[r].ravel().astype(float), np.ones(h.size),
                                     groups=inst.ravel())["p_interaction"] for r in range(d)])


def test_power_when_the_logit_gap_grows():
    rng = np.random.default_rng(13)
    h = np.log(HORIZONS) - np.log(HORIZONS).mean()
    eta = 0.8 - 0.9 * h + np.array([0.0, -1.0])[:, None] * (0.3 + 0.9 * h)  # interaction -0.9 per log L
    success = rng.random((200, N_INST, 2, len(HORIZONS))) < 1 / (1 + np.exp(-eta))
    power = float(np.mean(_pvalues(success) < 0.05))
    print(f"power (logit gap grows 0.9 per unit log L, 40 instances x 5 horizons): {power:.3f}")
    assert power >= 0.8


def test_power_when_per_step_error_quadruples_is_modest():
    # (1-p)^L on the logit scale is ~ -log p - log L while pL is small: a constant per-step error
    # ratio looks like a constant logit offset at short L, so this test has only moderate power.
    rng = np.random.default_rng(14)
    p = np.array([0.01, 0.04])[:, None]
    success = rng.random((200, 100, 2, len(HORIZONS))) < (1 - p) ** HORIZONS
    power = float(np.mean(_pvalues(success) < 0.05))
    print(f"power (geometric p 0.01 -> 0.04, 100 instances x 5 horizons): {power:.3f}")
    assert power >= 0.3


@pytest.mark.parametrize("trials", [1, 3])
def test_public_api_matches_episode_level_glm_with_cluster_errors(trials):
    # Several trials per cell: qdrift fits aggregated cells, statsmodels here one row per episode; the
    # small-sample factor must count episodes (not cells) and t must have G - 1 degrees of freedom.
    rng = np.random.default_rng(3)
    probs = (1 - np.array([0.02, 0.05])[:, None]) ** HORIZONS
    df = pd.concat([frame(rng.random((N_INST, 2, len(HORIZONS))) < probs).assign(trial=t) for t in range(trials)],
                   ignore_index=True)
    res = compounding_test(df, baseline="baseline", variant="w4g128", alternative="two-sided")
    h = np.log(df["horizon"]) - np.log(HORIZONS).mean()
    v = (df["config"] == "w4g128").astype(float)
    x = np.column_stack([np.ones(len(df)), v, h, v * h])
    ref = sm.GLM(df["success"].astype(float), x, family=sm.families.Binomial()).fit(
        cov_type="cluster", cov_kwds={"groups": df["seed"]}, use_t=True)
    row = res.row(term="variant:h")
    assert row["coef"] == pytest.approx(np.asarray(ref.params)[3], rel=1e-6)
    assert row["se"] == pytest.approx(np.asarray(ref.bse)[3], rel=1e-6)
    assert row["p_value"] == pytest.approx(np.asarray(ref.pvalues)[3], rel=1e-5)
    assert row["ci"] == pytest.approx(tuple(np.asarray(ref.conf_int())[3]), rel=1e-5)
    assert res.row(term="variant")["coef"] < 0 and row["coef"] < 0
    assert "cluster-robust over 40 clusters, t(39)" in res.method and "variant:h" in res.summary()


def test_few_clusters_keep_the_size_of_the_test():
    # Geometric null with instance heterogeneity and only 6 instances: judged against the normal,
    # the cluster-robust test rejected 8.3% of these 400 datasets at 5% (t(5): 2.8%).
    rng = np.random.default_rng(21)
    d, n_inst = 400, 6
    p_i = rng.beta(2, 60, size=(d, n_inst, 1, 1))
    success = rng.random((d, n_inst, 2, len(HORIZONS))) < (1 - p_i) ** HORIZONS
    rate, _ = rejection_rate(success, "two-sided")
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / d)


def test_linear_scale_and_one_sided_direction():
    rng = np.random.default_rng(4)
    success = rng.random((60, 2, len(HORIZONS))) < (1 - np.array([0.01, 0.05])[:, None]) ** HORIZONS
    less = compounding_test(frame(success), variant="w4g128", horizon_scale="linear")
    greater = compounding_test(frame(success), variant="w4g128", horizon_scale="linear", alternative="greater")
    p_less, p_greater = less.row(term="variant:h")["p_value"], greater.row(term="variant:h")["p_value"]
    assert p_less < 0.05 and p_less + p_greater == pytest.approx(1.0)


def test_separation_uses_firth_and_stays_finite():
    # The baseline always succeeds: the ML estimate of its intercept is +inf.
    rng = np.random.default_rng(5)
    success = np.ones((N_INST, 2, len(HORIZONS)), dtype=bool)
    success[:, 1, :] = rng.random((N_INST, len(HORIZONS))) < 0.97 ** HORIZONS
    res = compounding_test(frame(success), variant="w4g128")
    assert res.extra["firth"] and any("Firth" in n for n in res.notes)
    for r in res.rows:
        assert np.isfinite(r["coef"]) and np.isfinite(r["se"]) and 0 <= r["p_value"] <= 1


def test_all_identical_outcomes_give_a_defined_null_answer():
    res = compounding_test(frame(np.ones((N_INST, 2, len(HORIZONS)), dtype=bool)), variant="w4g128")
    row = res.row(term="variant:h")
    assert row["coef"] == pytest.approx(0.0, abs=1e-6) and row["p_value"] == pytest.approx(0.5, abs=1e-6)
    assert any("separated" in n for n in res.notes)


def test_variant_identical_to_the_baseline_uses_model_based_errors():
    # Same outcome in every cluster x horizon cell, with failures and successes at every horizon
    # (no separation): the clusters' scores for the variant terms cancel exactly, so cluster-robust
    # errors are rounding noise. The answer must be the model-based fit's, a null with a real width.
    rng = np.random.default_rng(8)
    base = rng.random((N_INST, len(HORIZONS))) < 0.98 ** HORIZONS
    success = np.stack([base, base], axis=1)
    res = compounding_test(frame(success), variant="w4g128")
    row = res.row(term="variant:h")
    df = frame(success)
    h = np.log(df["horizon"]) - np.log(HORIZONS).mean()
    v = (df["config"] == "w4g128").astype(float)
    ref = sm.GLM(df["success"].astype(float), np.column_stack([np.ones(len(df)), v, h, v * h]),
                 family=sm.families.Binomial()).fit()
    assert res.extra["identical"] and not res.extra["firth"]
    assert row["coef"] == pytest.approx(0.0, abs=1e-9) and row["p_value"] == pytest.approx(0.5, abs=1e-6)
    assert row["se"] == pytest.approx(np.asarray(ref.bse)[3], rel=1e-6) and row["se"] > 0.1
    assert "model-based" in res.method and any("degenerate" in n for n in res.notes)
    # One cluster differing in one cell is enough to keep the cluster-robust errors.
    success[0, 1, 2] = not success[0, 1, 2]
    other = compounding_test(frame(success), variant="w4g128")
    assert not other.extra["identical"] and "cluster-robust" in other.method


def test_firth_is_close_to_the_mle_without_separation():
    # Firth on non-separated data is close to the MLE (the penalty is O(1/n)).
    rng = np.random.default_rng(6)
    x = np.column_stack([np.ones(400), rng.normal(size=400)])
    y = (rng.random(400) < 1 / (1 + np.exp(-(0.3 + 0.8 * x[:, 1])))).astype(float)
    b, _ = firth_logit(x, y, np.ones(400))
    ref = sm.GLM(y, x, family=sm.families.Binomial()).fit().params
    assert np.allclose(b, ref, atol=0.03) and np.all(np.abs(b) <= np.abs(ref) + 1e-9)


@pytest.mark.parametrize("kwargs, match", [
    ({"variant": "nope"}, "config 'nope' has no rows.*valid configs"),
    ({"variant": "baseline"}, "both 'baseline'"),
    ({"horizon_scale": "sqrt"}, "horizon_scale"),
])
def test_bad_arguments(kwargs, match):
    success = np.ones((4, 2, len(HORIZONS)), dtype=bool)
    with pytest.raises(ValueError, match=match):
        compounding_test(frame(success), **kwargs)


def test_single_horizon_and_single_cluster_are_rejected():
    success = np.random.default_rng(0).random((5, 2, 1)) < 0.5
    with pytest.raises(ValueError, match="at least 2 distinct horizons"):
        compounding_test(frame(success, horizons=np.array([8])), variant="w4g128")
    one = frame(np.random.default_rng(0).random((1, 2, len(HORIZONS))) < 0.5)
    with pytest.raises(ValueError, match="only 1 cluster"):
        compounding_test(one, variant="w4g128")
