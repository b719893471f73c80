"""Token-level divergence between baseline and quantized models, and whether it predicts failure.

Rows are teacher-forced drift rows (qdrift.envs.drift.TokenDrift): {"episode", "step", "token_index",
"kl", "top1_agree", "base_logprob", "var_logprob"}. Tokens of one episode share a context, so every
CI is cluster-robust by episode (tokens are not independent draws); tail quantiles get an episode
bootstrap because no sandwich formula covers them.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from qdrift.stats.paired import _frame, cluster_se
from qdrift.stats.result import Result

DRIFT_COLS = ("episode", "step", "kl", "top1_agree", "base_logprob", "var_logprob")


class DivergenceResult(Result):
    def plot(self, ax=None):
        """Mean KL per agent step (the drift profile along the trajectory)."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3))
        steps, kl = self.extra["step"], self.extra["step_mean_kl"]
        ax.plot(steps, kl, marker="o")
        ax.set_xlabel("agent step")
        ax.set_ylabel("mean KL (nats)")
        ax.set_title(self.title)
        return ax


def _drift_frame(drift_rows):
    df = _frame(drift_rows)
    missing = [c for c in DRIFT_COLS if c not in df.columns]
    if missing:
        raise ValueError(f"drift rows lack columns {missing}; they have {list(df.columns)}")
    if df.empty:
        raise ValueError("no drift rows")
    if df["kl"].isna().any() or not np.isfinite(df["kl"].to_numpy(float)).all():
        raise ValueError(f"{int((~np.isfinite(df['kl'].to_numpy(float))).sum())} non-finite KL values")
    for col in DRIFT_COLS:  # a NaN elsewhere would pass silently into a mean, or crash a count
        if col != "kl" and df[col].isna().any():
            raise ValueError(f"{int(df[col].isna().sum())} missing (NaN) {col!r} values in the drift rows")
    return df


def _weighted_quantiles(x_sorted, codes_sorted, qs, n_boot, rng) -> np.ndarray:
    """Episode-bootstrap replicates of the (inverted-cdf) quantiles qs, shape (n_boot, len(qs)).

    Resampling episodes = giving each token its episode's multiplicity, so the tokens are sorted once.
    """
    n_groups, out = int(codes_sorted.max()) + 1, []
    chunk = max(1, 4_000_000 // x_sorted.size)
    for start in range(0, n_boot, chunk):
        w = rng.multinomial(n_groups, np.full(n_groups, 1 / n_groups), size=min(chunk, n_boot - start))
        cum = np.cumsum(w[:, codes_sorted], axis=1)
        idx = [(cum < q * cum[:, -1:]).sum(axis=1) for q in qs]
        out.append(np.stack([x_sorted[np.minimum(i, x_sorted.size - 1)] for i in idx], axis=1))
    return np.concatenate(out)


def divergence_summary(
    drift_rows, alpha: float = 0.05, n_boot: int = 1000, seed: int = 0
) -> DivergenceResult:
    """Mean KL, KL p90/p99, flip rate (1 - top1_agree) and mean log-prob drop, with episode-robust CIs."""
    df = _drift_frame(drift_rows)
    _, codes = np.unique(df["episode"].to_numpy(), return_inverse=True)
    n_groups, notes = int(codes.max()) + 1, []
    kl = df["kl"].to_numpy(float)
    if (kl < -1e-6).any():
        notes.append(f"{int((kl < -1e-6).sum())} KL values below 0 (numerical noise?) kept as given")
    series = {
        "mean KL": kl,
        "flip rate": 1.0 - df["top1_agree"].to_numpy(float),
        "mean logprob drop": (df["base_logprob"] - df["var_logprob"]).to_numpy(float),
    }
    if n_groups >= 2:
        crit, detail = (
            stats.t.ppf(1 - alpha / 2, n_groups - 1),
            f"cluster-robust by episode, t({n_groups - 1})",
        )
    else:
        crit, detail = stats.norm.ppf(1 - alpha / 2), "token-level CLT"
        notes.append("a single episode: CIs treat tokens as independent (too narrow if they are correlated)")
    rows = []
    for name, x in series.items():
        se = float(cluster_se(x, codes)) if n_groups >= 2 else float(np.std(x, ddof=1) / np.sqrt(x.size))
        m = float(x.mean())
        rows.append(
            {
                "quantity": name,
                "estimate": m,
                "se": se,
                "ci_low": m - crit * se,
                "ci_high": m + crit * se,
                "detail": detail,
            }
        )
    order = np.argsort(kl, kind="stable")
    qs = (0.90, 0.99)
    point = np.quantile(kl, qs, method="inverted_cdf")
    boot = (
        _weighted_quantiles(kl[order], codes[order], qs, n_boot, np.random.default_rng(seed))
        if n_boot > 0 and n_groups >= 2
        else None
    )
    for j, q in enumerate(qs):
        lo = hi = se = None
        if boot is not None:
            lo, hi = (float(v) for v in np.quantile(boot[:, j], [alpha / 2, 1 - alpha / 2]))
            se = float(boot[:, j].std(ddof=1))
        rows.append(
            {
                "quantity": f"KL p{round(100 * q)}",
                "estimate": float(point[j]),
                "se": se,
                "ci_low": lo,
                "ci_high": hi,
                "detail": f"episode bootstrap, {n_boot}" if boot is not None else "no CI",
            }
        )
    by_step = df.groupby("step")["kl"].mean()
    return DivergenceResult(
        title="Token divergence: baseline vs variant",
        method="cluster-robust means; bootstrap",
        n={"tokens": int(kl.size), "episodes": n_groups},
        rows=rows,
        notes=notes,
        extra={"step": by_step.index.to_numpy(), "step_mean_kl": by_step.to_numpy()},
    )


def _logit_row(name, x, fail, notes):
    """Logistic regression of failure on the standardised predictor, plus its AUC."""
    import statsmodels.api as sm
    from statsmodels.tools.sm_exceptions import PerfectSeparationError, PerfectSeparationWarning

    row = {"predictor": name, "odds_ratio_per_sd": None, "ci_low": None, "ci_high": None, "p_value": None}
    u = stats.mannwhitneyu(x[fail == 1], x[fail == 0], alternative="two-sided")
    row["auc"] = float(
        u.statistic / ((fail == 1).sum() * (fail == 0).sum())
    )  # P(x_fail > x_success), ties 1/2
    row["auc_p_value"] = float(u.pvalue)
    sd = x.std(ddof=1)
    if sd == 0:
        notes.append(f"{name} is constant across episodes: no logistic fit")
        return row
    exog = sm.add_constant((x - x.mean()) / sd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PerfectSeparationWarning)
            fit = sm.GLM(fail, exog, family=sm.families.Binomial()).fit()
    except (PerfectSeparationError, PerfectSeparationWarning):
        notes.append(f"{name} separates failures perfectly: odds ratio unbounded, only the AUC is reported")
        return row
    with np.errstate(over="ignore"):  # an unbounded interval is reported as inf
        lo, hi = np.exp(fit.conf_int()[1])
    row.update(
        odds_ratio_per_sd=float(np.exp(fit.params[1])),
        ci_low=float(lo),
        ci_high=float(hi),
        p_value=float(fit.pvalues[1]),
    )
    return row


def divergence_vs_failure(drift_rows, episode_rows, outcome: str = "success") -> Result:
    """Does an episode's mean KL / flip count predict its failure? Logistic GLM per SD, and AUC."""
    df = _drift_frame(drift_rows)
    ep = _frame(episode_rows)
    if "episode" not in ep.columns or outcome not in ep.columns:
        raise ValueError(f"episode rows need 'episode' and {outcome!r}; they have {list(ep.columns)}")
    if ep["episode"].duplicated().any():
        raise ValueError(f"{int(ep['episode'].duplicated().sum())} duplicated episode ids in episode rows")
    per = (
        df.assign(flip=1.0 - df["top1_agree"].astype(float))
        .groupby("episode")
        .agg(mean_kl=("kl", "mean"), flip_count=("flip", "sum"))
    )
    unknown = per.index.difference(ep["episode"])
    if len(unknown):
        raise ValueError(f"{len(unknown)} drift episodes have no episode row, e.g. {unknown[0]!r}")
    notes = []
    joined = per.join(ep.set_index("episode")[outcome], how="inner")
    dropped = len(ep) - len(joined)
    if dropped:
        notes.append(f"{dropped} episodes without drift rows left out")
    fail = 1.0 - joined[outcome].astype(float).to_numpy()
    if not ((fail == 0) | (fail == 1)).all():
        raise ValueError(f"{outcome!r} must be 0/1 or bool")
    if fail.min() == fail.max():
        raise ValueError(
            f"all {len(fail)} episodes {'failed' if fail[0] else 'succeeded'}: nothing to associate"
        )
    rows = [_logit_row(c, joined[c].to_numpy(float), fail, notes) for c in ("mean_kl", "flip_count")]
    return Result(
        title="Divergence vs task failure",
        method="GLM Binomial (statsmodels) on the standardised predictor; AUC = Mann-Whitney U/(n1 n0)",
        n={"episodes": len(fail), "failures": int(fail.sum())},
        rows=rows,
        notes=notes,
    )
