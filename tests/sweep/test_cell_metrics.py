"""Per-cell numbers a sink logs: teacher-forced drift."""

import numpy as np
import pytest

from qdrift.sweep.cell_metrics import drift_metrics


def test_drift_metrics_against_numpy():
    rng = np.random.default_rng(0)
    kl = rng.exponential(0.01, 500)
    agree = rng.random(500) > 0.03
    rows = [{"kl": float(k), "top1_agree": bool(a), "base_logprob": -0.5, "var_logprob": -0.5 - float(k)}
            for k, a in zip(kl, agree, strict=True)]
    m = drift_metrics(rows)
    assert m["tokens"] == 500 and m["mean_kl"] == pytest.approx(kl.mean())
    assert m["kl_p99"] == np.sort(kl)[int(np.ceil(0.99 * 500)) - 1]  # the inverted-cdf quantile, written out
    assert m["flip_rate"] == pytest.approx(1 - agree.mean()) and m["logprob_drop_mean"] == pytest.approx(kl.mean())
    assert drift_metrics([]) == {}
