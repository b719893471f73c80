"""Per-step accuracy of one configuration, with an interval that respects episodes.

Per-step accuracy is correct steps / steps, scored against the conditional oracle (a step after an
error is judged from where the agent stands), the number a model card states and a calibration
aims at. Steps of one episode share an instance and a context, so they are not independent: the
interval comes from an intercept-only binomial GLM with episode-clustered (sandwich) errors
(statsmodels), Wald on the logit scale. With no errors, or errors in one episode only, a sandwich
variance has nothing to estimate spread from, and the exact Clopper-Pearson interval over steps is
given instead (noted: it treats steps as independent).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import statsmodels.api as sm
from statsmodels.stats.proportion import proportion_confint

from qdrift.stats.result import Result


def per_step_accuracy(step_rows, cluster: str = "episode", alpha: float = 0.05) -> Result:
    """Accuracy over step rows (`qdrift.envs.runner.StepRecord.row()` dicts: `correct` and `cluster`)."""
    df = step_rows.copy() if isinstance(step_rows, pd.DataFrame) else pd.DataFrame(list(step_rows))
    missing = [c for c in ("correct", cluster) if c not in df.columns]
    if len(df) == 0 or missing:
        raise ValueError(f"per_step_accuracy needs step rows with 'correct' and {cluster!r}; "
                         f"got {len(df)} rows" + (f" missing {missing}" if missing else ""))
    y = df["correct"].astype(bool).to_numpy().astype(float)
    groups = pd.factorize(df[cluster])[0]
    n, k = len(y), int(y.sum())
    errors = n - k
    err_clusters = len(np.unique(groups[y == 0]))
    notes = []
    if err_clusters >= 2 and k > 0:
        fit = sm.GLM(y, np.ones((n, 1)), family=sm.families.Binomial()).fit(
            cov_type="cluster", cov_kwds={"groups": groups})
        b, se = float(fit.params[0]), float(fit.bse[0])
        z = _z(alpha)
        ci = (_expit(b - z * se), _expit(b + z * se))
        method = "binomial GLM, episode-clustered sandwich errors (statsmodels), Wald interval on the logit scale"
    else:
        ci = tuple(float(v) for v in proportion_confint(k, n, alpha=alpha, method="beta"))
        method = "exact Clopper-Pearson interval over steps"
        notes.append(f"{errors} error(s) in {err_clusters} episode(s): too few clusters for a sandwich variance; "
                     "exact interval over steps (treats steps as independent)")
    row = {"quantity": "per_step_accuracy", "estimate": k / n, "ci": ci, "correct": k, "steps": n,
           "episodes": int(groups.max()) + 1}
    return Result(title="Per-step accuracy", method=method, n={"steps": n, "episodes": row["episodes"]},
                  rows=[row], notes=notes)


def _expit(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def _z(alpha: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(1 - alpha / 2))
