"""Does teacher-forced divergence grow along the trajectory? Slopes of KL and flips on the step index.

The rows are teacher-forced drift rows (qdrift.envs.drift.TokenDrift). The replay feeds both models
the baseline's own tokens, so no earlier mistake of the variant is carried forward: what can grow
with the step index is the effect of a longer context the variant computed (its quantized KV cache
and activations over every earlier token). A flat profile with growing task failures says the
failures compound through actions; a rising one says the context itself degrades.

    kl ~ step / 100 + a level per episode     OLS within episodes, cluster-robust by episode (statsmodels)
    flip ~ 1 + step / 100                     logistic GLM, pooled, cluster-robust by episode (statsmodels)

The KL slope compares each episode with itself (its own mean removed from KL and from the step),
so episodes of different horizons, whose levels may differ for other reasons, cannot make a
slope on their own; an episode with a single step adds nothing to it, so it is left out of that
fit (and of its cluster count). Flips are rare, so their slope is pooled over episodes. Both slopes
are judged against t with G - 1 degrees of freedom (G clusters), not the normal.

One-sided p-values test growth (H1: slope > 0). Tokens of an episode share a context, so the
episode is the cluster; at least two episodes and two distinct steps are needed. The flip slope
needs at least MIN_FLIPS flips, in at least two episodes: a logistic slope fitted to a handful of
events, or to one episode's, says nothing (the usual ten events per parameter).
"""

from __future__ import annotations

import warnings

import numpy as np
import statsmodels.api as sm
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
    lo, hi = np.full(n_groups, np.inf), np.full(n_groups, -np.inf)
    np.minimum.at(lo, groups, steps)
    np.maximum.at(hi, groups, steps)
    if not (hi > lo).any():
        raise ValueError("drift_trend needs an episode with at least 2 distinct steps (each episode is compared "
                         "with itself); every episode here has one")
    cluster = {"cov_type": "cluster", "cov_kwds": {"groups": groups}}
    notes = []
    kl = df["kl"].to_numpy(float)
    # An episode with one distinct step is all zeros after the within transform: it adds nothing to the
    # slope or the sandwich, but would still count as a cluster and inflate G/(G-1) and t's degrees of
    # freedom (Correia 2015 on singletons under fixed effects). So the KL fit uses the others only.
    multi = (hi > lo)[groups]
    _, kl_groups = np.unique(groups[multi], return_inverse=True)
    g_kl = int(kl_groups.max()) + 1
    dropped = n_groups - g_kl
    if dropped:
        notes.append(f"{dropped} episode(s) with a single step left out of the KL slope (nothing within them to "
                     f"compare); its clusters and t degrees of freedom count the {g_kl} others")
    rows = [_kl_row(kl[multi], steps[multi], kl_groups, g_kl, alpha, notes)]
    flips = 1.0 - df["top1_agree"].to_numpy(float)
    rows.append(_flip_row(flips, groups, sm.add_constant(steps / PER), cluster, alpha, notes))
    return Result(
        title="Drift along the trajectory (teacher-forced)",
        method="statsmodels OLS within episodes (KL) / GLM Binomial (flips) on step/100, cluster-robust by "
               "episode; one-sided p for growth",
        n={"tokens": len(df), "episodes": n_groups, "steps": int(np.unique(steps).size)},
        rows=rows,
        notes=notes,
    )


def _kl_row(kl, steps, groups, n_groups: int, alpha: float, notes: list) -> dict:
    row = {"quantity": "KL slope (nats per 100 steps)", "estimate": None, "se": None, "ci_low": None,
           "ci_high": None, "p_growth": None, "detail": f"mean KL {kl.mean():.3g} over {n_groups} episode(s)"}
    if n_groups < 2:
        notes.append("only one episode has more than one step: the KL slope needs two (each is its own cluster)")
        return row
    fit = sm.OLS(_within(kl, groups), _within(steps / PER, groups)).fit(cov_type="cluster",
                                                                        cov_kwds={"groups": groups})
    crit = t_dist.ppf(1 - alpha / 2, n_groups - 1)
    slope, se = float(fit.params[0]), float(fit.bse[0])
    if se == 0:
        notes.append("KL does not vary with the step (e.g. identical models): no test")
    row.update(estimate=slope, se=se, ci_low=slope - crit * se, ci_high=slope + crit * se,
               p_growth=float(t_dist.sf(slope / se, n_groups - 1)) if se > 0 else None,
               detail=f"OLS within episodes, cluster-robust by episode, t({n_groups - 1}); mean KL {kl.mean():.3g}")
    return row


def _within(x: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """x minus its episode's mean (the within transformation: the same slope as one dummy per episode)."""
    means = np.bincount(groups, weights=x) / np.bincount(groups)
    return x - means[groups]


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
    # t with G-1 degrees of freedom, as for the KL slope: a normal reference over-rejects with few clusters
    df = int(groups.max())  # G - 1: codes run 0..G-1
    crit = t_dist.ppf(1 - alpha / 2, df)
    row.update(estimate=slope, se=se, ci_low=slope - crit * se, ci_high=slope + crit * se,
               p_growth=float(t_dist.sf(slope / se, df)) if se > 0 else None,
               detail=row["detail"] + f"; GLM Binomial pooled, cluster-robust by episode, t({df})")
    return row
