"""Success at every shorter horizon read off one long episode per seed, against (per-step accuracy)^h.

A study that runs one episode of length L per seed knows, for each h <= L, whether the episode had
made an error by step h: survival to h is the Kaplan-Meier curve of the first-error time at h. If
every step failed independently at one rate, survival would be p^h with p the per-step accuracy.
Two predictions are set beside the observed curve:

- from the per-step accuracy over all steps (what a model card states): survival above it means the
  errors cluster, in hard instances or in cascades after a first error (the conditional oracle
  judges every later step, so a cascade lowers p but not survival);
- from the per-step accuracy over the first `short` steps only (what a short-horizon evaluation
  measures): survival below it at long h means the error rate rises along the trajectory, so the
  short evaluation over-promises long-horizon success.

What is read off is "no error in the first h steps of an L-step task", not the success of a task of
length h: the prompt of the long task lists all L items. The table says which it reports.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qdrift.stats.accuracy import per_step_accuracy
from qdrift.stats.hazard import kaplan_meier
from qdrift.stats.result import Result
from qdrift.stats.rows import episode_frame


def survival_readoff(episodes, steps, horizons, config_col: str = "config", short: int | None = None,
                     alpha: float = 0.05) -> Result:
    """Per config and h: observed P(no error in the first h steps) with its pointwise Greenwood band
    (log-log), and the independent-steps prediction p^h with the per-step interval raised to h; with
    `short`, also the prediction from the accuracy of the first `short` steps (`predicted_short`).

    `episodes`: episode rows (first_error_step, steps, config); `steps`: their step rows (correct,
    step, seed, horizon, episode, config). Horizons beyond the longest episode are refused.
    """
    ep = episode_frame(episodes, config_col)
    st = steps.copy() if isinstance(steps, pd.DataFrame) else pd.DataFrame(list(steps))
    missing = [c for c in ("correct", "episode", config_col) if c not in st.columns]
    if missing:
        raise ValueError(f"step rows need columns {missing}")
    horizons = sorted(int(h) for h in horizons)
    longest = int(ep["steps"].max())
    if not horizons or horizons[0] < 1 or horizons[-1] > longest:
        raise ValueError(f"horizons must lie in 1..{longest} (the longest episode's steps), got {horizons}")
    if short is not None and not 1 <= short <= longest:
        raise ValueError(f"short must lie in 1..{longest}, got {short}")
    # the cluster of a step is its episode within its cell: the same episode index recurs across cells
    keys = [c for c in ("model", "task", "horizon", "seed", "trial", "episode") if c in st.columns]
    st["_episode"] = st[keys].astype(str).agg("|".join, axis=1)
    curves = kaplan_meier(ep, config_col, alpha=alpha).extra["curves"]
    rows, notes = [], []
    for config, cur in curves.items():
        mine = st[st[config_col] == config]
        acc = per_step_accuracy(mine, cluster="_episode", alpha=alpha)
        notes += [f"{config}: {n}" for n in acc.notes]
        p, (p_lo, p_hi) = acc.rows[0]["estimate"], acc.rows[0]["ci"]
        if short is not None:
            early = per_step_accuracy(mine[mine["step"] < short], cluster="_episode", alpha=alpha).rows[0]
            q, (q_lo, q_hi) = early["estimate"], early["ci"]
        t = cur["time"]
        for h in horizons:
            i = int(np.searchsorted(t, h, side="right")) - 1  # the last event time <= h
            s, lo, hi = (1.0, 1.0, 1.0) if i < 0 else (float(cur["surv"][i]), float(cur["lo"][i]),
                                                       float(cur["hi"][i]))
            row = {config_col: config, "horizon": h, "observed": s, "observed_ci": (lo, hi),
                   "predicted": p ** h, "predicted_ci": (p_lo ** h, p_hi ** h),
                   "per_step_accuracy": p, "episodes": int((ep[config_col] == config).sum())}
            if short is not None:
                row.update(predicted_short=q ** h, predicted_short_ci=(q_lo ** h, q_hi ** h),
                           short_accuracy=q)
            rows.append(row)
    return Result(title="Survival read off long episodes vs (per-step accuracy)^h",
                  method="Kaplan-Meier of the first-error time (statsmodels SurvfuncRight, log-log Greenwood "
                         "bands) at each h; prediction p^h from the episode-clustered per-step accuracy",
                  n={"episodes": len(ep), "steps": len(st)}, rows=rows,
                  notes=["observed = no error in the first h steps of the long task (its prompt lists every "
                         "step), not the success of an h-step task", *notes],
                  extra={"config_col": config_col})
