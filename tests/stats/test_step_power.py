"""Power of the per-step error-rate ratio, against a Monte Carlo of geometric first errors written out here."""

import numpy as np
import pytest
from scipy.stats import binomtest

from qdrift.stats.step_power import (
    mde_step_error_ratio,
    power_step_error_ratio,
    step_power_table,
    steps_at_risk,
)


def simulated_power(n, p0, ratio, horizon, reps=1500, seed=0):
    """Episodes run until a geometric first error or L; the exact conditional test of the two rates."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(reps):
        arms = []
        for p in (p0 * ratio, p0):
            first = rng.geometric(p, size=n)  # the step (1-based) of the first error
            errors = int((first <= horizon).sum())
            exposure = float(np.minimum(first, horizon).sum())
            arms.append((errors, exposure))
        (e1, r1), (e0, r0) = arms
        if e1 + e0 and binomtest(e1, e1 + e0, r1 / (r1 + r0)).pvalue < 0.05:
            hits += 1
    return hits / reps


def test_steps_at_risk_is_the_geometric_sum():
    assert steps_at_risk(0.1, 3) == pytest.approx(1 + 0.9 + 0.81)


@pytest.mark.parametrize("ratio", [1.5, 2.0])
def test_power_matches_a_simulation_of_the_design_and_errs_low(ratio):
    stated = power_step_error_ratio(100, 0.02, ratio, 64)
    simulated = simulated_power(100, 0.02, ratio, 64)
    assert stated <= simulated + 0.03  # a lower bound, as documented
    assert stated == pytest.approx(simulated, abs=0.12)


def test_no_effect_has_the_size_of_the_test_and_more_seeds_see_smaller_effects():
    assert power_step_error_ratio(200, 0.02, 1.0, 64) == pytest.approx(0.05)
    mdes = [r["mde_ratio"] for r in step_power_table(0.02, 64, seeds=(50, 200, 800)).rows]
    assert mdes[0] > mdes[1] > mdes[2] > 1
    assert power_step_error_ratio(200, 0.02, mde_step_error_ratio(200, 0.02, 64), 64) == pytest.approx(0.8, abs=1e-4)


def test_nonsense_is_refused():
    with pytest.raises(ValueError, match="p_step"):
        mde_step_error_ratio(100, 0.0, 64)
    with pytest.raises(ValueError, match="n_seeds"):
        power_step_error_ratio(1, 0.02, 2.0, 64)
