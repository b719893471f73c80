"""Per-step accuracy's interval, against a cluster-sampling variance written out here."""

import math
import random

import pytest
from scipy.stats import beta, norm

from qdrift.stats.accuracy import per_step_accuracy


def test_clustered_interval_is_the_ratio_estimator_variance_on_the_logit_scale():
    rng = random.Random(3)
    rows = [{"episode": e, "correct": rng.random() < (0.9 if e % 3 else 0.99)} for e in range(30) for _ in range(25)]
    got = per_step_accuracy(rows).rows[0]
    n = len(rows)
    p = sum(r["correct"] for r in rows) / n
    groups = {}
    for r in rows:
        groups.setdefault(r["episode"], []).append(r["correct"])
    g = len(groups)
    # cluster sampling: var(p) = G/(G-1) * sum_g (c_g - p n_g)^2 / n^2, then the delta method to the logit
    var_p = g / (g - 1) * sum((sum(v) - p * len(v)) ** 2 for v in groups.values()) / n ** 2
    se = math.sqrt(var_p) / (p * (1 - p))
    logit = math.log(p / (1 - p))
    z = norm.ppf(0.975)
    want = [1 / (1 + math.exp(-(logit + s * z * se))) for s in (-1, 1)]
    assert got["estimate"] == pytest.approx(p)
    assert got["ci"] == pytest.approx(want, rel=1e-6)
    assert got["episodes"] == 30 and got["steps"] == 750


def test_no_errors_gets_the_exact_bound_over_steps():
    res = per_step_accuracy([{"episode": e, "correct": True} for e in range(4) for _ in range(10)])
    lo, hi = res.rows[0]["ci"]
    assert hi == 1.0 and lo == pytest.approx(beta.ppf(0.025, 40, 1))
    assert "too few clusters" in res.notes[0]


def test_rows_without_the_columns_are_refused():
    with pytest.raises(ValueError, match="needs step rows with 'correct' and 'episode'"):
        per_step_accuracy([{"step": 0}])
