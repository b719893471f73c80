"""Time to the first error: a discrete-time hazard test, Kaplan-Meier curves, log-rank and Cox.

If per-step errors are independent with a constant rate p, success is (1-p)^L and the hazard of
the first error is flat in the step index. "Self-conditioning" (a model that has erred, or has a
long context of its own output, errs more) makes the hazard rise with the step. `hazard_test`
compares the two with a likelihood-ratio test; the rest are the standard survival summaries.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import statsmodels.api as sm
from scipy.stats import chi2, norm
from statsmodels.duration.hazard_regression import PHReg
from statsmodels.duration.survfunc import SurvfuncRight, survdiff
from statsmodels.stats.proportion import proportion_confint

from qdrift.stats.result import Result
from qdrift.stats.rows import (
    cluster_ids,
    config_order,
    default_baseline,
    episode_frame,
    failure_times,
    hazard_cells,
    pick_configs,
)

SURV_COLUMNS = ("steps", "first_error_step")


def _cols(cluster) -> tuple[str, ...]:
    if cluster is None:
        return ()
    return (cluster,) if isinstance(cluster, str) else tuple(cluster)


def _select(rows, config_col, configs, extra=()):
    df = episode_frame(rows, config_col, required=(*SURV_COLUMNS, *extra))
    chosen = pick_configs(df, config_col, configs) if configs is not None else config_order(df, config_col)
    df = df[df[config_col].isin(chosen)].reset_index(drop=True)
    return df, chosen


# --- discrete-time hazard ---------------------------------------------------------------------------

class HazardResult(Result):
    """`.plot()` draws the empirical per-step hazard (errors / at risk) with the fitted curves."""

    def plot(self, ax=None):
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        cells, col = self.extra["cells"], self.extra["config_col"]
        for c, g in cells.groupby(col, sort=False):
            (line,) = ax.plot(g["step"], g["events"] / g["at_risk"], ".", alpha=0.6, label=f"{c} observed")
            ax.plot(g["step"], g["fitted"], "-", color=line.get_color(), label=f"{c} fitted")
        ax.set_xlabel("step")
        ax.set_ylabel("P(first error at step | none before)")
        ax.legend()
        return ax


def hazard_lrt(events, at_risk, config, step, step_scale: str = "log", interaction: bool = False,
               alternative: str = "increasing") -> dict:
    """LRT of constant vs step-dependent logistic hazard on (config, step) counts: the array entry point.

    M0: logit h = a_config. M1 adds b * f(step) (or b_config * f(step) when `interaction`), with
    f = log(step + 1) or step. Configs with no errors are left out (their likelihood is the same,
    maximal, under both models). Returns LR, df, p-value, the slope(s) and M1's fitted hazards.
    """
    events, at_risk, step = (np.asarray(a, float) for a in (events, at_risk, step))
    config = np.asarray(config)
    f = np.log1p(step) if step_scale == "log" else step
    levels = [c for c in dict.fromkeys(config.tolist()) if events[config == c].sum() > 0]
    keep = np.isin(config, levels)
    out = {"levels": levels, "fitted": np.where(keep, np.nan, 0.0), "slope": math.nan, "slope_se": math.nan}
    if not levels or np.ptp(f[keep]) == 0:
        out.update(lr=0.0, df=1 if not interaction else max(len(levels), 1), p=1.0, degenerate=True)
        out["fitted"][keep] = (events[keep] / at_risk[keep]) if keep.any() else 0.0
        return out
    e, r, fk, ck = events[keep], at_risk[keep], f[keep], config[keep]
    dummies = np.column_stack([(ck == c).astype(float) for c in levels])
    slope = dummies * fk[:, None] if interaction else fk[:, None]
    endog = np.column_stack([e, r - e])
    fam = sm.families.Binomial()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m0 = sm.GLM(endog, dummies, family=fam).fit()
        m1 = sm.GLM(endog, np.column_stack([dummies, slope]), family=fam).fit()
    lr = max(0.0, 2.0 * (m1.llf - m0.llf))
    df = slope.shape[1]
    b = np.asarray(m1.params)[len(levels):]
    se = np.asarray(m1.bse)[len(levels):]
    if df == 1 and alternative == "increasing":
        p = float(norm.sf(math.copysign(math.sqrt(lr), b[0])))  # signed root of the LR statistic
    else:
        p = float(chi2.sf(lr, df))
    out["fitted"][keep] = m1.fittedvalues
    out.update(lr=float(lr), df=int(df), p=p, slope=b, slope_se=se, degenerate=False)
    return out


def hazard_test(rows, config_col: str = "config", configs=None, step_scale: str = "log",
                interaction: bool = False, alternative: str = "increasing", alpha: float = 0.05) -> HazardResult:
    """Constant (geometric) vs increasing hazard of the first error, by a likelihood-ratio test.

    Each episode contributes one Bernoulli record per step at risk (0..first_error, or 0..steps-1
    when it never errs: censored at `steps`); the records are counted per (config, step). With one
    common slope the test is one-sided for a rising hazard (signed root of the LR statistic) unless
    alternative="two-sided"; with `interaction` (a slope per config) it is the chi-square LRT.
    Rows: each config's constant-hazard p (errors / steps at risk, Wilson interval, treating steps
    as independent) and the test. Caveat: instances that differ in p make the pooled hazard
    *fall* with the step (the error-prone ones leave early), which masks self-conditioning; the
    one-sided test stays valid then, but loses power.
    """
    if step_scale not in ("log", "linear"):
        raise ValueError(f"step_scale must be 'log' or 'linear', not {step_scale!r}")
    if alternative not in ("increasing", "two-sided"):
        raise ValueError(f"alternative must be 'increasing' or 'two-sided', not {alternative!r}")
    df, chosen = _select(rows, config_col, configs)
    cells = hazard_cells(df, config_col, chosen)
    res = hazard_lrt(cells["events"], cells["at_risk"], cells[config_col], cells["step"], step_scale,
                     interaction, alternative)
    cells = cells.assign(fitted=res["fitted"])
    notes = []
    out = []
    for c in chosen:
        g = cells[cells[config_col] == c]
        e, r = int(g["events"].sum()), int(g["at_risk"].sum())
        lo, hi = proportion_confint(e, r, alpha=alpha, method="wilson") if r else (0.0, 1.0)
        out.append({"quantity": "p_step", config_col: c, "estimate": e / r if r else 0.0,
                    "ci": (float(lo), float(hi)), "statistic": None, "df": None, "p_value": None})
        if e == 0:
            notes.append(f"{c}: no errors in {r} steps at risk; p = 0 and it adds nothing to the hazard-shape test")
    z = norm.ppf(1 - alpha / 2)
    f_name = "log(step+1)" if step_scale == "log" else "step"
    if res["degenerate"]:
        notes.append("the hazard's shape is not identifiable (no errors, or every episode is at risk on one step "
                     "only): LR = 0, p = 1 (no evidence against a constant hazard)")
        out.append({"quantity": f"slope on {f_name}", config_col: "all", "estimate": 0.0, "ci": (math.nan, math.nan),
                    "statistic": 0.0, "df": res["df"], "p_value": 1.0})
    else:
        slopes = res["slope"]
        names = res["levels"] if interaction else ["all"]
        for j, name in enumerate(names):
            b, se = float(slopes[j]), float(res["slope_se"][j])
            last = j == len(names) - 1
            out.append({"quantity": f"slope on {f_name}", config_col: name, "estimate": b,
                        "ci": (b - z * se, b + z * se), "statistic": res["lr"] if last else None,
                        "df": res["df"] if last else None, "p_value": res["p"] if last else None})
    kind = ("one-sided (hazard increasing), signed-root LR" if res["df"] == 1 and alternative == "increasing"
            else f"chi-square({res['df']}) LR")
    notes.append(f"test: logit hazard ~ config vs ~ config + {'config:' if interaction else ''}{f_name}; {kind}")
    return HazardResult(title="Constant vs increasing first-error hazard",
                        method="discrete-time logistic hazard, binomial GLM on person-period counts (statsmodels), "
                               "likelihood-ratio test (scipy chi2)",
                        n={"episodes": len(df), "steps_at_risk": int(cells["at_risk"].sum()),
                           "errors": int(cells["events"].sum())},
                        rows=out, notes=notes, extra={"cells": cells, "config_col": config_col})


# --- survival curves and tests ----------------------------------------------------------------------

class SurvivalCurves(Result):
    """Kaplan-Meier curves of steps to the first error; `.plot()` draws them with pointwise bands."""

    def plot(self, ax=None):
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        for c, cur in self.extra["curves"].items():
            t = np.r_[0, cur["time"]]
            (line,) = ax.step(t, np.r_[1, cur["surv"]], where="post", label=str(c))
            ax.fill_between(t, np.r_[1, cur["lo"]], np.r_[1, cur["hi"]], step="post", color=line.get_color(),
                            alpha=0.2)
        ax.set_xlabel("steps")
        ax.set_ylabel("P(no error yet)")
        ax.set_ylim(0, 1.02)
        ax.legend(title=self.extra["config_col"])
        return ax


def kaplan_meier(rows, config_col: str = "config", configs=None, alpha: float = 0.05) -> SurvivalCurves:
    """Per config: statsmodels SurvfuncRight of the first-error time, the median and its interval.

    Time = steps survived including the failing one (error at 0-based step k -> time k + 1);
    episodes without an error are censored at `steps`. The median follows R's survival package
    (`km_median`); one that is never reached (survival stays above 50%) is reported as inf.
    Bands: pointwise log(-log) Greenwood intervals, computed
    here because SurvfuncRight only offers simultaneous bands.
    """
    df, chosen = _select(rows, config_col, configs)
    time, event = failure_times(df)
    z = norm.ppf(1 - alpha / 2)
    curves, out, notes = {}, [], []
    for c in chosen:
        m = (df[config_col] == c).to_numpy()
        sf = SurvfuncRight(time[m].astype(float), event[m].astype(int))
        s, se = np.asarray(sf.surv_prob), np.asarray(sf.surv_prob_se)
        with np.errstate(divide="ignore", invalid="ignore"):
            sll = se / (s * np.abs(np.log(s)))
            lo = np.where((s > 0) & (s < 1), s ** np.exp(z * sll), s)
            hi = np.where((s > 0) & (s < 1), s ** np.exp(-z * sll), s)
        curves[c] = {"time": np.asarray(sf.surv_times), "surv": s, "se": se, "lo": lo, "hi": hi}
        n_ev = int(event[m].sum())
        if n_ev == 0:
            med, ci = math.inf, (math.inf, math.inf)
            notes.append(f"{c}: no errors; survival stays at 1, median inf")
        else:
            med = km_median(np.asarray(sf.surv_times), s, float(time[m].max()))
            try:
                with np.errstate(divide="ignore", invalid="ignore"):
                    ci = tuple(float(v) for v in sf.quantile_ci(0.5, alpha=alpha))
            except (ValueError, IndexError, ZeroDivisionError):
                ci = (math.nan, math.nan)
            if math.isnan(med):
                med = math.inf
                notes.append(f"{c}: survival never falls to 50% within the observed steps; median inf")
            if math.isnan(ci[0]) and math.isnan(ci[1]) and math.isfinite(med):
                ci = (med, med)  # no step's band straddles 50%: survival jumps across it at the median
            elif math.isnan(ci[1]):
                ci = (med if math.isnan(ci[0]) else ci[0], math.inf)  # the band never reaches 50%
            elif math.isnan(ci[0]):
                ci = (med, ci[1])
        out.append({config_col: c, "n": int(m.sum()), "errors": n_ev, "median_steps": med, "median_ci": ci,
                    "surv_at_max": float(s[-1]) if len(s) else 1.0})
    return SurvivalCurves(title="Kaplan-Meier: steps to first error", method="SurvfuncRight (statsmodels)",
                          n={"episodes": len(df), "errors": int(event.sum())}, rows=out, notes=notes,
                          extra={"curves": curves, "config_col": config_col})


def km_median(times: np.ndarray, surv: np.ndarray, last_time: float, tol: float = 1e-9) -> float:
    """Median of a Kaplan-Meier curve (event `times`, survival `surv` after each), nan if never reached.

    R survival's rule (quantile.survfit): where a horizontal line at 0.5 meets the step curve; if
    the curve sits exactly at 0.5 on a segment, the segment's midpoint (to `last_time`, the last
    observed time, when the segment runs to the end). Written here because statsmodels'
    `SurvfuncRight.quantile` takes the first time with survival strictly below 0.5, which skips a
    segment at exactly 0.5, common when episodes are few and times are whole steps.
    """
    below = np.flatnonzero(surv <= 0.5 + tol)
    if len(below) == 0:
        return math.nan
    i = int(below[0])
    if abs(surv[i] - 0.5) > tol:
        return float(times[i])
    end = float(times[i + 1]) if i + 1 < len(times) else float(last_time)
    return (float(times[i]) + end) / 2


def logrank(rows, config_col: str = "config", configs=None) -> Result:
    """Log-rank test that the configs share one first-error survival curve (statsmodels survdiff)."""
    df, chosen = _select(rows, config_col, configs)
    if len(chosen) < 2:
        raise ValueError(f"the log-rank test compares >= 2 configs; have {chosen}")
    time, event = failure_times(df)
    notes = []
    if event.sum() == 0:
        stat, p = 0.0, 1.0
        notes.append("no errors in any config: the curves are identical (all 1); chi-square 0, p = 1")
    else:
        stat, p = survdiff(time.astype(float), event.astype(int), df[config_col].to_numpy())
    return Result(title="Log-rank test: steps to first error", method="survdiff (statsmodels), chi-square",
                  n={"episodes": len(df), "errors": int(event.sum()), "configs": len(chosen)},
                  rows=[{"configs": " vs ".join(chosen), "chisq": float(stat), "df": len(chosen) - 1,
                         "p_value": float(p)}], notes=notes)


def cox(rows, config_col: str = "config", baseline: str | None = None, configs=None, ties: str = "efron",
        alpha: float = 0.05, cluster=None) -> Result:
    """Cox proportional-hazards ratio of each config vs the baseline (statsmodels PHReg).

    ties="efron" (default; R's coxph default, better with the many ties of step counts) or
    "breslow" (SAS/Stata default). cluster=("env", "seed") gives the robust (Lin-Wei) covariance.
    A config with no errors has HR 0 (monotone likelihood): reported as 0 with interval (0, inf).
    """
    df, chosen = _select(rows, config_col, configs, extra=_cols(cluster))
    base, notes = default_baseline(df, config_col, baseline)
    if base not in chosen:
        raise ValueError(f"baseline {base!r} is not among the selected configs {chosen}")
    others = [c for c in chosen if c != base]
    if not others:
        raise ValueError(f"the Cox model compares configs with {base!r}; no other config has rows")
    time, event = failure_times(df)
    cfg = df[config_col].to_numpy()
    ev_by = {c: int(event[cfg == c].sum()) for c in chosen}
    fit_cfg = [c for c in others if ev_by[c] > 0]
    out = []
    z = norm.ppf(1 - alpha / 2)
    groups = cluster_ids(df, cluster)[0] if cluster is not None else None
    if ev_by[base] == 0 or not fit_cfg:
        notes.append("a hazard ratio needs errors in the baseline and the config; see the rows' notes")
    if ev_by[base] > 0 and fit_cfg:
        m = np.isin(cfg, [base, *fit_cfg])
        exog = np.column_stack([(cfg[m] == c).astype(float) for c in fit_cfg])
        model = PHReg(time[m].astype(float), exog, status=event[m].astype(int), ties=ties)
        res = model.fit(groups=groups[m]) if groups is not None else model.fit()
        params, bse = np.asarray(res.params), np.asarray(res.bse)
        for j, c in enumerate(fit_cfg):
            b, se = float(params[j]), float(bse[j])
            out.append({config_col: c, "coef": b, "se": se, "hazard_ratio": math.exp(b),
                        "ci": (math.exp(b - z * se), math.exp(b + z * se)), "p_value": float(2 * norm.sf(abs(b / se)))})
    for c in others:
        if c in fit_cfg and ev_by[base] > 0:
            continue
        if ev_by[c] == 0 and ev_by[base] == 0:
            hr, ci, note = math.nan, (0.0, math.inf), "neither has errors: the hazard ratio is undefined (nan)"
        elif ev_by[c] == 0:
            hr, ci, note = 0.0, (0.0, math.inf), "no errors: HR 0 (the partial likelihood is monotone)"
        else:
            hr, ci, note = math.inf, (0.0, math.inf), f"baseline {base!r} has no errors: HR inf"
        notes.append(f"{c}: {note}")
        out.append({config_col: c, "coef": math.log(hr) if hr > 0 else (math.nan if math.isnan(hr) else -math.inf), "se": math.nan,
                    "hazard_ratio": hr, "ci": ci, "p_value": math.nan})
    out.sort(key=lambda r: others.index(r[config_col]))
    se_kind = "robust (clustered)" if cluster is not None else "model-based"
    return Result(title=f"Cox model: hazard of first error vs {base}",
                  method=f"PHReg (statsmodels), ties={ties}, {se_kind} errors, Wald {1 - alpha:.0%} interval",
                  n={"episodes": len(df), "errors": int(event.sum())}, rows=out, notes=notes,
                  extra={"baseline": base})
