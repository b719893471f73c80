"""Survival read off long episodes: on independent steps it matches p^h; on a rising error rate it falls
below p^h at long h (simulated with known rates, so the truth is known)."""

import numpy as np
import pytest

from qdrift.stats.readoff import survival_readoff

L = 64


def simulate(error_rate, n=400, seed=0, config="c"):
    """Episode and step rows of n episodes whose step t errs with probability error_rate(t), independently."""
    rng = np.random.default_rng(seed)
    episodes, steps = [], []
    for e in range(n):
        wrong = rng.random(L) < np.array([error_rate(t) for t in range(L)])
        first = int(np.argmax(wrong)) if wrong.any() else None
        episodes.append({"config": config, "episode": e, "env": "sim", "trial": 0, "seed": 1_000_000 + e, "horizon": L, "steps": L,
                         "success": first is None, "first_error_step": first})
        steps += [{"config": config, "episode": e, "seed": 1_000_000 + e, "horizon": L, "step": t,
                   "correct": not bool(wrong[t])} for t in range(L)]
    return episodes, steps


def test_independent_steps_survive_as_p_to_the_h_within_both_intervals():
    episodes, steps = simulate(lambda t: 0.02)
    # 99.9% intervals: twelve coverage checks at 95% would fail one run in two by chance alone
    res = survival_readoff(episodes, steps, [1, 8, 32, 64], alpha=0.001)
    for r in res.rows:
        truth = 0.98 ** r["horizon"]
        assert r["observed_ci"][0] <= truth <= r["observed_ci"][1]
        assert r["predicted_ci"][0] <= truth <= r["predicted_ci"][1]
        assert r["observed_ci"][0] <= r["predicted"] <= r["observed_ci"][1]
    assert "not the success of an h-step task" in res.notes[0]


def test_a_rising_error_rate_survives_below_what_the_first_steps_accuracy_predicts():
    # a mean per-step error of 0.02 as above, but rising along the trajectory: the first 8 steps
    # look far better than the long run turns out
    rate = lambda t: 0.04 * t / (L - 1)  # noqa: E731
    episodes, steps = simulate(rate, n=600, seed=1)
    long = survival_readoff(episodes, steps, [L], short=8, alpha=0.001).rows[0]
    truth = np.prod([1 - rate(t) for t in range(L)])
    assert long["observed_ci"][0] <= truth <= long["observed_ci"][1]
    assert long["observed_ci"][1] < long["predicted_short_ci"][0]


def test_errors_that_cascade_after_the_first_survive_above_the_all_steps_prediction():
    """After a first error every step errs with probability 0.5: p drops, survival does not."""
    rng = np.random.default_rng(2)
    episodes, steps = [], []
    for e in range(400):
        erred, first, row = False, None, []
        for t in range(L):
            wrong = rng.random() < (0.5 if erred else 0.01)
            if wrong and not erred:
                erred, first = True, t
            row.append({"config": "c", "episode": e, "seed": e, "horizon": L, "step": t, "correct": not wrong})
        steps += row
        episodes.append({"config": "c", "episode": e, "env": "sim", "trial": 0, "seed": e, "horizon": L, "steps": L,
                         "success": first is None, "first_error_step": first})
    r = survival_readoff(episodes, steps, [32]).rows[0]
    assert r["observed_ci"][0] <= 0.99 ** 32 <= r["observed_ci"][1]
    assert r["observed_ci"][0] > r["predicted_ci"][1]


def test_a_horizon_beyond_the_episodes_is_refused():
    episodes, steps = simulate(lambda t: 0.02, n=20)
    with pytest.raises(ValueError, match="horizons must lie in 1..64"):
        survival_readoff(episodes, steps, [65])
