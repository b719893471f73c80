"""Does teacher-forced divergence grow along the trajectory? Slopes of KL and flips on the step index.

The rows are teacher-forced drift rows (qdrift.envs.drift.TokenDrift). The replay feeds both models
the baseline's own tokens, so no earlier mistake of the variant is carried forward: what can grow
with the step index is the effect of a longer context the variant computed (its quantized KV cache
and activations over every earlier token). A flat profile with growing task failures says the
failures compound through actions; a rising one says the context itself degrades.

    kl ~ 1 + step / 100           OLS, cluster-robust by episode (statsmodels)
    flip ~ 1 + step / 100         logistic GLM, cluster-robust by episode (statsmodels)

One-sided p-values test growth (H1: slope > 0). Tokens of an episode share a context, so the
episode is the cluster; at least two episodes and two distinct steps are needed. The flip slope
needs at least MIN_FLIPS flips, in at least two episodes: a logistic slope fitted to a handful of
events, or to one episode's, says nothing (the usual ten events per parameter).
"""

from __future__ import annotations

import warnings

import numpy as np
import statsmodels.api as sm
from scipy.stats import norm
from scipy.stats import t as t_dist

from qdrift.stats.divergence import _drift_frame
from qdrift.stats.result import Result

PER = 100.0  # slopes are reported per 100 agent steps
MIN_FLIPS = 10


def drift_trend(drift_rows, alpha: float = 0.05) -> Result:
    """Slope of mean KL and of the flip log-odds per 100 steps, with episode-clustered CIs."""
    df = _drift_frame(drift_rows)
    _, groups = np.unique(df["episode"].to_numpy(), return_inverse=True)
    n_groups = int(groups.max()) + 1
    steps = df["step"].to_numpy(float)
    if n_groups < 2:
        raise ValueError(f"drift_trend needs at least 2 episodes (the cluster), got {n_groups}")
    if np.unique(steps).size < 2:
        raise ValueError(f"drift_trend needs at least 2 distinct steps, got only step {steps[0]:g}")
    exog = sm.add_constant(steps / PER)
    cluster = {"cov_type": "cluster", "cov_kwds": {"groups": groups}}
    notes = []
    kl_fit = sm.OLS(df["kl"].to_numpy(float), exog).fit(**cluster)
    crit = t_dist.ppf(1 - alpha / 2, n_groups - 1)
    slope, se = float(kl_fit.params[1]), float(kl_fit.bse[1])
    rows = [{
        "quantity": "KL slope (nats per 100 steps)", "estimate": slope, "se": se,
        "ci_low": slope - crit * se, "ci_high": slope + crit * se,
        "p_growth": float(t_dist.sf(slope / se, n_groups - 1)) if se > 0 else None,
        "detail": f"OLS, cluster-robust by episode, t({n_groups - 1}); KL at step 0 {kl_fit.params[0]:.3g}",
    }]
    rows.append(_flip_row(1.0 - df["top1_agree"].to_numpy(float), groups, exog, cluster, alpha, notes))
    if se == 0:
        notes.append("KL does not vary with the step (e.g. identical models): no test")
    return Result(
        title="Drift along the trajectory (teacher-forced)",
        method="statsmodels OLS / GLM Binomial on step/100, cluster-robust by episode; one-sided p for growth",
        n={"tokens": len(df), "episodes": n_groups, "steps": int(np.unique(steps).size)},
        rows=rows,
        notes=notes,
    )


def _flip_row(flip, groups, exog, cluster, alpha, notes) -> dict:
    n_flips, n_eps = int(flip.sum()), np.unique(groups[flip == 1]).size
    row = {"quantity": "flip log-odds slope (per 100 steps)", "estimate": None, "se": None, "ci_low": None,
           "ci_high": None, "p_growth": None, "detail": f"{n_flips} flips in {flip.size} tokens, {n_eps} episodes"}
    if flip.min() == flip.max():
        what = "no flips" if flip.max() == 0 else "every token flips"
        notes.append(f"{what}: the flip slope is not estimable")
        return row
    if n_flips < MIN_FLIPS or n_eps < 2:
        notes.append(f"{n_flips} flips in {n_eps} episode(s): too few for a flip slope (needs >= {MIN_FLIPS} flips "
                     "in >= 2 episodes)")
        return row
    from statsmodels.tools.sm_exceptions import PerfectSeparationError, PerfectSeparationWarning

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PerfectSeparationWarning)
            fit = sm.GLM(flip, exog, family=sm.families.Binomial()).fit(**cluster)
    except (PerfectSeparationError, PerfectSeparationWarning):
        notes.append("the step separates flips from agreements perfectly: the flip slope is unbounded")
        return row
    slope, se = float(fit.params[1]), float(fit.bse[1])
    z = norm.ppf(1 - alpha / 2)
    row.update(estimate=slope, se=se, ci_low=slope - z * se, ci_high=slope + z * se,
               p_growth=float(norm.sf(slope / se)) if se > 0 else None,
               detail=row["detail"] + "; GLM Binomial, cluster-robust by episode, z")
    return row
