"""Success against horizon L: the curves, the L at which success falls to 50%, the per-step error ratio.

The question is how fast a configuration's success decays with trajectory length. Under
independent per-step errors success is (1-p)^L, so the natural summaries are the curve itself, the
50% horizon L50 = ln 0.5 / ln(1-p), and the ratio of per-step error rates between configurations.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
import statsmodels.api as sm
from statsmodels.stats.proportion import proportion_confint
from statsmodels.stats.rates import confint_poisson

from qdrift.stats.paired import cluster_se
from qdrift.stats.result import Result
from qdrift.stats.rows import (
    DEFAULT_CLUSTER,
    cluster_ids,
    config_order,
    default_baseline,
    episode_frame,
    failure_times,
    require_horizons,
)

LN2 = math.log(2.0)


class HorizonCurves(Result):
    """Success rate per config and horizon; `.plot()` draws the curves with their interval bands."""

    def plot(self, ax=None):
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        frame = self.to_frame()
        col = self.extra["config_col"]
        for config, g in frame.groupby(col, sort=False):
            lo, hi = zip(*g["ci"], strict=True)
            (line,) = ax.plot(g["horizon"], g["rate"], marker="o", label=str(config))
            ax.fill_between(g["horizon"], lo, hi, color=line.get_color(), alpha=0.2)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("horizon L (steps)")
        ax.set_ylabel("success rate")
        ax.set_ylim(0, 1.02)
        ax.legend(title=col)
        return ax


def success_by_horizon(rows, config_col: str = "config", alpha: float = 0.05,
                       cluster=DEFAULT_CLUSTER) -> HorizonCurves:
    """Per config and L: successes / episodes with a Wilson interval (good coverage near 0 and 1).

    Repeated trials of one instance (the `cluster` columns, by default env and seed) are correlated, so
    where a cell holds an instance more than once the interval is Wilson's at the effective sample size
    n / deff, deff the design effect (cluster-robust over binomial variance of the rate, at least 1;
    Korn & Graubard 1998). Treated as independent, 8 instances x 10 trials (beta(2, 2) success rates)
    covered 76% at a stated 95% in a simulation, 90% with the design effect.
    `cluster=None`, or one episode per instance, gives the plain Wilson interval.
    """
    df = episode_frame(rows, config_col, required=("horizon", "success"))
    notes = []
    if cluster == DEFAULT_CLUSTER and not set(DEFAULT_CLUSTER) <= set(df.columns):
        notes.append(f"rows have no {' and '.join(DEFAULT_CLUSTER)} columns: episodes are treated as independent")
        cluster = None
    codes = cluster_ids(df, cluster, minimum=1)[0] if cluster is not None else np.arange(len(df))
    df = df.assign(_cluster=codes)
    g = df.groupby([config_col, "horizon"], sort=False)["success"].agg(["size", "sum"]).reset_index()
    order = {c: i for i, c in enumerate(config_order(df, config_col))}
    g = g.sort_values([config_col, "horizon"], key=lambda s: s.map(order) if s.name == config_col else s)
    deff = [_design_effect(df[(df[config_col] == c) & (df["horizon"] == h)]) for c, h in zip(g[config_col], g["horizon"],
                                                                                           strict=True)]
    n_eff = g["size"].to_numpy() / np.array(deff)
    lo, hi = proportion_confint(g["sum"].to_numpy() / g["size"].to_numpy() * n_eff, n_eff, alpha=alpha,
                                method="wilson")
    out = [{config_col: c, "horizon": int(h), "n": int(n), "successes": int(s), "rate": s / n,
            "ci": (float(a), float(b)), "design_effect": float(d)}
           for c, h, n, s, a, b, d in zip(g[config_col], g["horizon"], g["size"], g["sum"], lo, hi, deff, strict=True)]
    flat = g.groupby(config_col, sort=False)["sum"].sum()
    for c in flat.index:
        k = g[g[config_col] == c]
        if (k["sum"] == k["size"]).all() or (k["sum"] == 0).all():
            notes.append(f"{c}: every episode {'succeeded' if (k['sum'] > 0).all() else 'failed'}; the Wilson "
                         "interval is still informative (it is not degenerate at 0 or 1)")
    if max(deff) > 1:
        notes.append(f"instances repeat within cells: intervals use the effective sample size n / deff "
                     f"(design effect up to {max(deff):.2f})")
    return HorizonCurves(title="Success rate by horizon", method=f"Wilson score interval, {1 - alpha:.0%} "
                         "(statsmodels proportion_confint), at the effective sample size where instances repeat",
                         n={"episodes": len(df), "configs": len(order)}, rows=out, notes=notes,
                         extra={"config_col": config_col})


def _design_effect(cell) -> float:
    """Cluster-robust variance of a cell's success rate over its binomial variance (at least 1)."""
    y = cell["success"].to_numpy(float)
    _, codes = np.unique(cell["_cluster"].to_numpy(), return_inverse=True)
    p, n, groups = y.mean(), y.size, int(codes.max()) + 1
    if groups == n or groups < 2 or p in (0.0, 1.0):  # one episode each, or nothing to estimate from
        return 1.0
    robust = float(cluster_se(y, codes)) ** 2
    return max(1.0, robust / (p * (1 - p) / n))


# --- the 50% horizon -------------------------------------------------------------------------------

def _cells(df: pd.DataFrame, config_col: str, configs: list[str], codes: np.ndarray, n_clusters: int):
    """Per cluster x (config, L) cell: successes and episodes, so a cluster bootstrap is a matrix product."""
    horizons = sorted(int(h) for h in np.unique(df["horizon"]))
    ci = df[config_col].map({c: i for i, c in enumerate(configs)}).to_numpy()
    hi = np.searchsorted(horizons, df["horizon"].to_numpy())
    k = ci * len(horizons) + hi
    size = n_clusters * len(configs) * len(horizons)
    flat = codes * len(configs) * len(horizons) + k
    n = np.bincount(flat, minlength=size).reshape(n_clusters, -1).astype(float)
    s = np.bincount(flat, weights=df["success"].to_numpy(float), minlength=size).reshape(n_clusters, -1)
    return np.asarray(horizons, float), s, n


def _batched_fit(x: np.ndarray, s: np.ndarray, n: np.ndarray, link: str, iters: int = 60):
    """Binomial GLM eta = a + b*x fitted to many count vectors at once (rows of s, n).

    Written by hand because a bootstrap needs thousands of 2-parameter fits and statsmodels fits one
    model per call; it is checked against statsmodels GLM in the tests. Separated replicates (MLE
    at infinity) stop at clipped probabilities; their a, b still place L50 where the data put it.
    """
    s, n = np.atleast_2d(s), np.atleast_2d(n)
    rate = np.clip((s + 0.5) / (n + 1.0), 1e-3, 1 - 1e-3)
    z = np.log(rate / (1 - rate)) if link == "logit" else np.log(-np.log(rate))
    w = np.where(n > 0, n, 0.0)
    a, b = _wls(x, z, w + 1e-12)
    for _ in range(iters):
        eta = a[:, None] + b[:, None] * x
        if link == "logit":
            eta = np.clip(eta, -30, 30)
            mu = 1 / (1 + np.exp(-eta))
            d = mu * (1 - mu)
        else:  # success = exp(-exp(eta)): cloglog of the failure probability
            eta = np.clip(eta, -30, 3.5)
            mu = np.exp(-np.exp(eta))
            d = -np.exp(eta) * mu
        var = np.clip(mu * (1 - mu), 1e-300, None)
        work = n * d * d / var
        zz = eta + np.where(n > 0, (s / np.where(n > 0, n, 1) - mu) / np.where(d == 0, 1e-300, d), 0.0)
        a_new, b_new = _wls(x, zz, work + 1e-300)
        done = np.nanmax(np.abs(a_new - a) + np.abs(b_new - b)) < 1e-10
        a, b = a_new, b_new
        if done:
            break
    return a, b


def _wls(x, z, w):
    sw, swx, swxx = w.sum(1), (w * x).sum(1), (w * x * x).sum(1)
    swz, swxz = (w * z).sum(1), (w * x * z).sum(1)
    det = sw * swxx - swx * swx
    det = np.where(np.abs(det) < 1e-300, 1e-300, det)
    b = (sw * swxz - swx * swz) / det
    a = (swz - b * swx) / np.where(sw == 0, 1e-300, sw)
    return a, b


def _l50_from_fit(a, b, link: str):
    """L where the fitted success is 0.5; inf where success does not decrease with L."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if link == "logit":
            x = -a / b
            falling = b < 0
        else:
            x = (math.log(LN2) - a) / b
            falling = b > 0
        out = np.where(falling & np.isfinite(x), np.exp(np.clip(x, -700, 700)), np.inf)
    return out


def _l50_empirical(x: np.ndarray, s: np.ndarray, n: np.ndarray):
    """Linear interpolation in log L of the empirical curve at its first fall through 0.5.

    inf where success never falls below 0.5, 0 where it is below 0.5 already at the shortest L.
    Horizons with no episodes in a row (a config not run at every horizon of the pool, or a bootstrap
    resample that drew none) are skipped: the curve runs through the horizons it has; nan if none.
    """
    s, n = np.atleast_2d(s), np.atleast_2d(n)
    out = np.full(s.shape[0], np.inf)
    for i in range(s.shape[0]):
        has = n[i] > 0
        if not has.any():
            out[i] = math.nan
            continue
        xi, ri = x[has], s[i, has] / n[i, has]
        below = np.flatnonzero(ri < 0.5)
        if below.size == 0:
            continue
        j = below[0]
        if j == 0:
            out[i] = 0.0
            continue
        r0, r1 = ri[j - 1], ri[j]
        t = (r0 - 0.5) / (r0 - r1)
        out[i] = math.exp(math.log(xi[j - 1]) + t * (math.log(xi[j]) - math.log(xi[j - 1])))
    return out


def _l50(x, s, n, model):
    """L50 for each row of counts; all successes -> inf, all failures -> 0 (no fit needed or possible)."""
    if model == "empirical":
        return _l50_empirical(x, s, n)
    s, n = np.atleast_2d(s), np.atleast_2d(n)
    link = "logit" if model == "logistic" else "cloglog"
    a, b = _batched_fit(np.log(x), s, n, link)
    out = _l50_from_fit(a, b, link)
    st, nt = s.sum(1), n.sum(1)
    out[st == nt] = np.inf
    out[st == 0] = 0.0
    return out


def _sm_l50(x, s, n, model):
    """Point estimate with statsmodels' GLM (the reference implementation of the same fit)."""
    if model == "empirical":
        return float(_l50_empirical(x, s, n)[0]), False
    keep = n > 0
    xs, ss, ns = np.log(x[keep]), s[keep], n[keep]
    if model == "logistic":
        fam, endog = sm.families.Binomial(), np.column_stack([ss, ns - ss])
    else:
        fam, endog = sm.families.Binomial(link=sm.families.links.CLogLog()), np.column_stack([ns - ss, ss])
    separated = ss.sum() in (0, ns.sum()) or _separated(xs, ss, ns)
    if separated:
        return float(_l50(x, s, n, model)[0]), True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = sm.GLM(endog, sm.add_constant(xs), family=fam).fit()
    a, b = res.params
    return float(_l50_from_fit(np.array([a]), np.array([b]), "logit" if model == "logistic" else "cloglog")[0]), False


def _separated(x, s, n):
    """1-D (quasi-)complete separation: successes and failures lie on opposite sides of some L."""
    f = n - s
    if not (s > 0).any() or not (f > 0).any():
        return True
    return x[s > 0].max() <= x[f > 0].min() or x[f > 0].max() <= x[s > 0].min()


def _quantiles(v: np.ndarray, alpha: float):
    """Percentile interval that tolerates inf replicates (no interpolation between inf and inf)."""
    v = v[~np.isnan(v)]
    if len(v) == 0:
        return (math.nan, math.nan)
    lo, hi = np.quantile(v, [alpha / 2, 1 - alpha / 2], method="inverted_cdf")
    return (float(lo), float(hi))


def _boot_weights(rng, n_boot: int, g: int):
    """Cluster bootstrap multiplicities, in chunks so a large G never makes a huge matrix."""
    chunk = max(1, min(n_boot, int(2e7 // max(g, 1))))
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        idx = rng.integers(0, g, size=(m, g)) + (np.arange(m) * g)[:, None]
        yield np.bincount(idx.ravel(), minlength=m * g).reshape(m, g).astype(float)
        done += m


def half_horizon(rows, config_col: str = "config", baseline: str | None = None, n_boot: int = 1000,
                 seed: int = 0, alpha: float = 0.05, model: str = "cloglog",
                 cluster=DEFAULT_CLUSTER) -> Result:
    """L50 per config and each config's L50 ratio to the baseline, with cluster-bootstrap intervals.

    model="cloglog" (default) fits success = exp(-exp(a) L^b), i.e. a binomial GLM with the
    complementary log-log link on failure against log L. It contains independent per-step errors
    exactly (b = 1: success = (1-p)^L) and lets the hazard grow (b > 1) or shrink (b < 1), so a
    geometric L50 = ln 0.5 / ln(1-p) is recovered without bias. model="logistic" fits logit(success)
    on log L; model="empirical" interpolates the observed curve in log L (no extrapolation). The
    interval resamples clusters (instances) with replacement, the same draw for every config so
    the ratio's interval is paired; percentile interval.
    """
    if model not in ("cloglog", "logistic", "empirical"):
        raise ValueError(f"model must be 'cloglog', 'logistic' or 'empirical', not {model!r}")
    df = episode_frame(rows, config_col, required=("horizon", "success", *_cluster_cols(cluster)))
    base, notes = default_baseline(df, config_col, baseline)
    configs = config_order(df, config_col)
    require_horizons(df, config_col, configs, minimum=2)
    codes, g = cluster_ids(df, cluster)
    x, s, n = _cells(df, config_col, configs, codes, g)
    k = len(x)
    s_tot, n_tot = s.sum(0), n.sum(0)
    est, boot = {}, {}
    for i, c in enumerate(configs):
        sl = slice(i * k, (i + 1) * k)
        est[c], sep = _sm_l50(x, s_tot[sl], n_tot[sl], model)
        if sep:
            notes.append(f"{c}: outcomes are separated in L (e.g. all successes); the fit's MLE is at infinity, "
                         "so L50 is where the limiting curve crosses 0.5 (inf if success never falls)")
    rng = np.random.default_rng(seed)
    parts = {c: [] for c in configs}
    for w in _boot_weights(rng, n_boot, g):
        bs, bn = w @ s, w @ n
        for i, c in enumerate(configs):
            sl = slice(i * k, (i + 1) * k)
            parts[c].append(_l50(x, bs[:, sl], bn[:, sl], model))
    boot = {c: np.concatenate(v) for c, v in parts.items()}
    lo_h, hi_h = float(x.min()), float(x.max())
    out = []
    for c in configs:
        e = est[c]
        out.append({"quantity": "L50", config_col: c, "estimate": e, "ci": _quantiles(boot[c], alpha),
                    "extrapolated": bool(not (lo_h <= e <= hi_h))})
        if np.isinf(boot[c]).any():
            notes.append(f"{c}: {int(np.isinf(boot[c]).sum())}/{n_boot} bootstrap fits never fall below 50% "
                         "(L50 = inf); the interval's upper end can be inf")
    for c in configs:
        if c == base:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = boot[c] / boot[base]  # 0/0 and inf/inf give nan: such replicates have no ratio
            point = float(np.float64(est[c]) / np.float64(est[base]))
        if np.isinf(est[c]) and np.isinf(est[base]):
            notes.append(f"{c}/{base}: both L50 are inf (success never falls below 50%); the ratio is undefined (nan)")
        elif est[c] == 0 and est[base] == 0:
            notes.append(f"{c}/{base}: both L50 are 0 (success is below 50% at every horizon); the ratio is undefined (nan)")
        undefined = int(np.isnan(ratio).sum())
        if undefined:
            notes.append(f"{c}/{base}: {undefined}/{n_boot} bootstrap ratios are undefined (0/0 or inf/inf) and "
                         "left out of the interval")
        out.append({"quantity": "L50 ratio", config_col: f"{c}/{base}", "estimate": float(point),
                    "ci": _quantiles(ratio, alpha), "extrapolated": out[configs.index(c)]["extrapolated"]})
    method = {"cloglog": "binomial GLM, cloglog link on failure ~ log L (statsmodels); success = exp(-exp(a) L^b)",
              "logistic": "binomial GLM, logit(success) ~ log L (statsmodels)",
              "empirical": "linear interpolation of the empirical success curve in log L"}[model]
    return Result(title="50% success horizon", method=f"{method}; {n_boot} cluster-bootstrap resamples, "
                  f"percentile {1 - alpha:.0%} interval", n={"episodes": len(df), "clusters": g, "horizons": k},
                  rows=out, notes=notes, extra={"bootstrap": boot, "baseline": base})


def _cluster_cols(cluster) -> tuple[str, ...]:
    if cluster is None:
        return ()
    return (cluster,) if isinstance(cluster, str) else tuple(cluster)


# --- per-step error rates ---------------------------------------------------------------------------

def step_error_ratio(rows, config_col: str = "config", baseline: str | None = None, alpha: float = 0.05,
                     cluster=DEFAULT_CLUSTER) -> Result:
    """Per-step first-error rate p = errors / steps at risk per config, and each config's ratio to baseline.

    p is the geometric MLE (the constant-hazard model's estimate). The intervals come from a
    Poisson GLM of errors on config with log(steps at risk) as offset and cluster-robust errors: the
    same point estimates, with a variance that allows instances to differ. A config with no errors
    gets p = 0 and an exact (Clopper-Pearson) bound, one whose errors all fall in one cluster the
    exact Poisson interval, and ratios involving either the exact conditional binomial interval;
    those are not cluster-robust (noted).
    """
    df = episode_frame(rows, config_col, required=("steps", "first_error_step", *_cluster_cols(cluster)))
    base, notes = default_baseline(df, config_col, baseline)
    configs = config_order(df, config_col)
    codes, g = cluster_ids(df, cluster)
    time, event = failure_times(df)
    ci_idx = df[config_col].map({c: i for i, c in enumerate(configs)}).to_numpy()
    key = codes * len(configs) + ci_idx
    size = g * len(configs)
    e_gc = np.bincount(key, weights=event.astype(float), minlength=size).reshape(g, -1)
    r_gc = np.bincount(key, weights=time.astype(float), minlength=size).reshape(g, -1)
    e_c, r_c = e_gc.sum(0), r_gc.sum(0)
    if (r_c == 0).any():
        bad = [c for c, r in zip(configs, r_c, strict=True) if r == 0]
        raise ValueError(f"config(s) {bad} have no steps at risk (every episode has steps == 0)")
    fit_cfg = [i for i in range(len(configs)) if e_c[i] > 0]
    z = _norm_ppf(1 - alpha / 2)
    params, cov = {}, None
    if fit_cfg:
        rows_g, rows_c = np.nonzero(r_gc[:, fit_cfg] > 0)
        cols = np.asarray(fit_cfg)[rows_c]
        exog = np.zeros((len(rows_g), len(fit_cfg)))
        exog[np.arange(len(rows_g)), rows_c] = 1.0
        res = sm.GLM(e_gc[rows_g, cols], exog, family=sm.families.Poisson(),
                     exposure=r_gc[rows_g, cols]).fit(cov_type="cluster", cov_kwds={"groups": rows_g})
        params = {fit_cfg[j]: float(res.params[j]) for j in range(len(fit_cfg))}
        cov = np.asarray(res.cov_params())
    # A sandwich variance needs errors in at least two clusters: from one (a single error, say) it is
    # that cluster's own residual, no estimate of spread at all. Such configs get the exact Poisson
    # interval, and ratios involving them the exact conditional one (both noted, not cluster-robust).
    robust = {i for i in params if (e_gc[:, i] > 0).sum() >= 2}
    out = []
    for i, c in enumerate(configs):
        p = e_c[i] / r_c[i]
        if i in robust:
            se = math.sqrt(cov[fit_cfg.index(i), fit_cfg.index(i)])
            ci = (math.exp(params[i] - z * se), math.exp(params[i] + z * se))
        elif i in params:
            ci = tuple(float(x) for x in confint_poisson(int(e_c[i]), float(r_c[i]), method="exact-c", alpha=alpha))
            notes.append(f"{c}: its {int(e_c[i])} error(s) fall in one cluster, too few for a cluster-robust "
                         "variance; exact Poisson interval instead (not cluster-robust)")
        else:
            ci = (0.0, float(proportion_confint(0, int(r_c[i]), alpha=alpha, method="beta")[1]))
            notes.append(f"{c}: no errors in {int(r_c[i])} steps at risk; p = 0 with an exact upper bound")
        out.append({"quantity": "p_step", config_col: c, "estimate": float(p), "ci": ci,
                    "errors": int(e_c[i]), "steps_at_risk": int(r_c[i])})
    b = configs.index(base)
    for i, c in enumerate(configs):
        if i == b:
            continue
        var = None
        if i in robust and b in robust:
            ji, jb = fit_cfg.index(i), fit_cfg.index(b)
            var = cov[ji, ji] + cov[jb, jb] - 2 * cov[ji, jb]
        if var is not None and var > 1e-12 * (cov[ji, ji] + cov[jb, jb]):
            d = params[i] - params[b]
            se = math.sqrt(var)
            est, ci = math.exp(d), (math.exp(d - z * se), math.exp(d + z * se))
        elif var is not None:
            # The same errors in the same clusters: the sandwich variance of the difference is 0 (or
            # rounds below it), a zero-width interval that claims certainty no data support.
            est, ci = _exact_ratio(e_c[i], r_c[i], e_c[b], r_c[b], alpha)
            notes.append(f"{c}/{base}: the same errors in the same clusters, so the cluster-robust variance of "
                         "the ratio is 0; exact conditional binomial interval instead (not cluster-robust)")
        elif i in params and b in params:
            est, ci = _exact_ratio(e_c[i], r_c[i], e_c[b], r_c[b], alpha)
            notes.append(f"{c}/{base}: a config's errors fall in one cluster; exact conditional binomial "
                         "interval (not cluster-robust)")
        else:
            est, ci = _exact_ratio(e_c[i], r_c[i], e_c[b], r_c[b], alpha)
            notes.append(f"{c}/{base}: a config has no errors; ratio {est} with the exact conditional "
                         "binomial interval (not cluster-robust)" + (" - both have none, so the ratio is "
                                                                     "undefined (nan)" if math.isnan(est) else ""))
        out.append({"quantity": "p_step ratio", config_col: f"{c}/{base}", "variant": c, "baseline": base,
                    "estimate": float(est), "ci": ci,
                    "errors": int(e_c[i] + e_c[b]), "steps_at_risk": int(r_c[i] + r_c[b])})
    return Result(title="Per-step error rate", method="geometric MLE errors/steps at risk; Poisson GLM with "
                  "log exposure, cluster-robust (statsmodels), Wald interval on the log scale",
                  n={"episodes": len(df), "clusters": g}, rows=out, notes=notes, extra={"baseline": base})


def _exact_ratio(e1, r1, e0, r0, alpha):
    """Ratio of two Poisson rates given the total: e1 ~ Binomial(e1 + e0, r1 q / (r1 q + r0))."""
    tot = int(e1 + e0)
    if tot == 0:
        return math.nan, (0.0, math.inf)
    lo, hi = proportion_confint(int(e1), tot, alpha=alpha, method="beta")
    conv = r0 / r1

    def to_ratio(q):
        return q / (1 - q) * conv if q < 1 else math.inf

    est = (e1 / r1) / (e0 / r0) if e0 > 0 else math.inf
    return est, (float(to_ratio(lo)), float(to_ratio(hi)))


def _norm_ppf(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))
