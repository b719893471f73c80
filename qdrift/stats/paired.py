"""Paired comparison of two configurations scored on the same items (baseline vs quantized).

Pairing matters: two configurations share most of their errors, so the SE of the difference is far
smaller than that of two independent accuracies. Items drawn from one template or episode are not
independent either, so a cluster-robust SE is reported next to the CLT one (Miller 2024, "Adding
Error Bars to Evals"). McNemar exact / mid-p, a paired bootstrap and (given a margin) TOST
equivalence complete the picture.

The vectorised helpers (`clt_se`, `cluster_se`, `mcnemar_p`, `tost_p`) take a leading batch axis
so the simulations in the tests run many datasets at once; `paired_comparison` uses the same ones.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from scipy import stats

from qdrift.stats.result import Result

_TOL = 1e-12


class PairedResult(Result):
    """A Result with shortcuts to the numbers people quote, and a forest plot."""

    @property
    def diff(self) -> float:
        return self.row(quantity="difference (CLT)")["estimate"]

    @property
    def mcnemar_p(self) -> float:
        if not any(r["quantity"] == "McNemar exact" for r in self.rows):
            raise ValueError(f"{self.title}: no McNemar test (outcomes not binary); see notes")
        return self.row(quantity="McNemar exact")["p_value"]

    @property
    def conclusion(self) -> str | None:
        return self.extra.get("conclusion")

    def plot(self, ax=None):
        """Forest plot of the difference estimates with 0 and ±margin marked."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 2.5))
        rows = [r for r in self.rows if r["quantity"].startswith(("difference", "TOST")) and r["ci_low"] is not None]
        for y, r in enumerate(rows):
            ax.errorbar(
                r["estimate"],
                y,
                xerr=[[r["estimate"] - r["ci_low"]], [r["ci_high"] - r["estimate"]]],
                fmt="o",
                capsize=3,
            )
        ax.set_yticks(range(len(rows)), [r["quantity"] for r in rows])
        ax.axvline(0, color="grey", lw=0.8)
        margin = self.extra.get("margin")
        if margin is not None:
            for m in (-margin, margin):
                ax.axvline(m, color="red", ls="--", lw=0.8)
        ax.set_xlabel(f"{self.extra['b_name']} - {self.extra['a_name']} (accuracy)")
        ax.set_title(self.title)
        return ax


# ---------------------------------------------------------------- vectorised helpers


def clt_se(d: np.ndarray) -> np.ndarray:
    """SE of the mean of paired differences along the last axis (sample SD, ddof=1)."""
    return np.std(d, axis=-1, ddof=1) / np.sqrt(d.shape[-1])


def cluster_se(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """Cluster-robust SE of the mean along the last axis; `codes` are cluster ids 0..G-1.

    The intercept-only sandwich with statsmodels' small-sample factor G/(G-1): equal to
    OLS(x, 1).fit(cov_type="cluster") (checked in the tests). Written by hand because statsmodels fits
    one dataset per call and the simulations need thousands at once.
    """
    x = np.atleast_2d(x)
    codes = np.asarray(codes)
    n_groups = int(codes.max()) + 1
    resid = x - x.mean(axis=-1, keepdims=True)
    offsets = (np.arange(x.shape[0]) * n_groups)[:, None]
    sums = np.bincount(
        (codes[None, :] + offsets).ravel(), weights=resid.ravel(), minlength=x.shape[0] * n_groups
    ).reshape(x.shape[0], n_groups)
    se = np.sqrt(n_groups / (n_groups - 1) * (sums**2).sum(axis=-1)) / x.shape[-1]
    return se if se.size > 1 else se[0]


def mcnemar_p(n01, n10) -> tuple[np.ndarray, np.ndarray]:
    """(exact, mid-p) McNemar p-values from the discordant counts, vectorised.

    exact = min(1, 2 * Binom(n, 1/2).cdf(min count)), as statsmodels' mcnemar(exact=True) (checked in
    the tests). mid-p is written by hand because statsmodels lacks it: the exact conditional test is
    conservative (its size falls well below alpha), the mid-p (exact minus the point probability) keeps
    close to alpha (Fagerland, Lydersen & Laake 2013, BMC Med Res Methodol 13:91), who also give the
    tied case n01 == n10 as 1 - pmf/2. No discordant pairs: both are 1.
    """
    n01, n10 = np.asarray(n01), np.asarray(n10)
    n, k = n01 + n10, np.minimum(n01, n10)
    exact = np.minimum(1.0, 2 * stats.binom.cdf(k, n, 0.5))
    pmf = stats.binom.pmf(k, n, 0.5)
    mid = np.where(n01 == n10, 1 - 0.5 * pmf, np.minimum(1.0, exact - pmf))
    return np.where(n == 0, 1.0, exact), np.where(n == 0, 1.0, mid)


def tost_p(diff, se, margin: float, df=np.inf, units: int | None = None) -> np.ndarray:
    """TOST p-value for |true diff| < margin: the larger of the two one-sided p-values.

    By hand (statsmodels' ttost_paired covers only the CLT case) so the cluster-robust SE can be used.
    SE 0 (every paired difference the same) leaves the t statistic undefined, and is no evidence by
    itself: 100 agreeing items leave a difference of up to 3.0 points open (one-sided 95%). With no difference
    at all, the p-value is then an exact bound: outcomes lie in [0, 1], so each paired difference is in
    [-1, 1], and a true mean difference of at least `margin` needs a nonzero difference on at least that
    share of units; seeing none in `units` independent units (items, or clusters: a cluster may differ
    as one) has probability at most (1 - margin)^units. Without `units`, or with a constant nonzero
    difference, there is nothing to test: p = 1.
    """
    diff, se = np.asarray(diff, float), np.asarray(se, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_low = stats.t.sf((diff + margin) / se, df)
        p_upp = stats.t.cdf((diff - margin) / se, df)
    p = np.maximum(p_low, p_upp)
    bound = (1 - min(margin, 1.0)) ** units if units else 1.0
    return np.where(se > 0, p, np.where(diff == 0, bound, 1.0))


# ---------------------------------------------------------------- input checks


def _outcomes(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty: nothing to compare")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} has {int((~np.isfinite(arr)).sum())} NaN/inf values")
    if arr.min() < 0 or arr.max() > 1:
        raise ValueError(f"{name} must be 0/1 or scores in [0, 1]; got range [{arr.min()}, {arr.max()}]")
    return arr


def _codes(clusters, n: int) -> tuple[np.ndarray, int]:
    clusters = np.asarray(clusters)
    if clusters.shape != (n,):
        raise ValueError(f"clusters has shape {clusters.shape}, expected ({n},) like the outcomes")
    _, codes = np.unique(clusters, return_inverse=True)
    n_groups = int(codes.max()) + 1
    if n_groups < 2:
        raise ValueError("all items are in a single cluster: a cluster-robust SE needs at least 2 clusters")
    return codes, n_groups


def _boot_diffs(d, codes, n_boot: int, rng) -> np.ndarray:
    """Bootstrap means of d, resampling items (or whole clusters when given).

    Resampling items is drawn as a multinomial over d's distinct values, which has the same law and
    needs only (n_boot x distinct values) memory.
    """
    if codes is None:
        units, counts = np.unique(d, return_counts=True)
        w = rng.multinomial(d.size, counts / d.size, size=n_boot)
        return w @ units / d.size
    sums, sizes = np.bincount(codes, weights=d), np.bincount(codes).astype(float)
    n_groups, out = sums.size, []
    chunk = max(1, 4_000_000 // n_groups)
    for start in range(0, n_boot, chunk):
        w = rng.multinomial(n_groups, np.full(n_groups, 1 / n_groups), size=min(chunk, n_boot - start))
        out.append((w @ sums) / (w @ sizes))
    return np.concatenate(out)


# ---------------------------------------------------------------- the analysis


def _row(quantity, estimate, se, lo, hi, p, detail="") -> dict[str, Any]:
    def f(v):
        return None if v is None else float(v)

    return {
        "quantity": quantity,
        "estimate": float(estimate),
        "se": f(se),
        "ci_low": f(lo),
        "ci_high": f(hi),
        "p_value": f(p),
        "detail": detail,
    }


def paired_comparison(
    a,
    b,
    clusters=None,
    items=None,
    alpha: float = 0.05,
    n_boot: int = 2000,
    seed: int = 0,
    margin: float | None = None,
    a_name: str = "a",
    b_name: str = "b",
    mcnemar: bool | None = None,
) -> PairedResult:
    """Compare outcomes `b` against `a` on the same aligned items (difference = b - a).

    `clusters` (one id per item) adds a cluster-robust SE/CI (t with G-1 df) and makes the bootstrap
    resample clusters. `margin` adds TOST equivalence. McNemar runs when outcomes are 0/1; with float
    scores it is skipped with a note (`mcnemar=True` makes that a ValueError). `n_boot=0` skips the
    bootstrap. Degenerate data (all differences equal, SE 0) gives a zero-width CI and a note; TOST
    then never rests on the zero SE (see `tost_p`). McNemar's rows need 0/1 outcomes;
    `mcnemar=False` leaves them out. Accuracies of 0/1 outcomes get Wilson intervals.
    """
    a, b = _outcomes(a, a_name), _outcomes(b, b_name)
    if a.size != b.size:
        raise ValueError(f"{a_name} has {a.size} items but {b_name} has {b.size}: outcomes must be paired")
    n = a.size
    if n < 2:
        raise ValueError("need at least 2 paired items for a standard error")
    if items is not None:
        items = list(items)
        if len(items) != n:
            raise ValueError(f"items has {len(items)} ids for {n} outcomes")
        dups = [i for i, c in Counter(items).items() if c > 1]
        if dups:
            raise ValueError(f"{len(dups)} duplicated item ids, e.g. {dups[0]!r}: pairing is ambiguous")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    d, notes = b - a, []
    z = stats.norm.ppf(1 - alpha / 2)
    diff, se = float(d.mean()), float(clt_se(d))
    rows = []
    binary = bool(np.all((a == 0) | (a == 1)) and np.all((b == 0) | (b == 1)))
    for name, x in ((a_name, a), (b_name, b)):
        s = float(clt_se(x))
        if binary:  # Wilson's interval stays inside [0, 1], where the Wald one crosses 1 near 100%
            from statsmodels.stats.proportion import proportion_confint

            lo, hi = proportion_confint(int(x.sum()), n, alpha=alpha, method="wilson")
            rows.append(_row(f"accuracy {name}", x.mean(), s, lo, hi, None, "Wilson interval"))
        else:
            rows.append(_row(f"accuracy {name}", x.mean(), s, x.mean() - z * s, x.mean() + z * s, None))
    p_z = 2 * stats.norm.sf(abs(diff) / se) if se > 0 else (1.0 if diff == 0 else 0.0)
    if se == 0:
        notes.append(
            f"every paired difference equals {diff:g}: SE 0, zero-width CIs"
            + (", p = 1" if diff == 0 else ", p = 0")
        )
    rows.append(_row("difference (CLT)", diff, se, diff - z * se, diff + z * se, p_z, "z test"))

    codes = df = None
    tost_se = se
    if clusters is not None:
        codes, n_groups = _codes(clusters, n)
        cse, df = float(cluster_se(d, codes)), n_groups - 1
        t = stats.t.ppf(1 - alpha / 2, df)
        p_c = 2 * stats.t.sf(abs(diff) / cse, df) if cse > 0 else (1.0 if diff == 0 else 0.0)
        rows.append(
            _row(
                "difference (cluster-robust)",
                diff,
                cse,
                diff - t * cse,
                diff + t * cse,
                p_c,
                f"{n_groups} clusters, t({df})",
            )
        )
        tost_se = cse
        if cse == 0 and se > 0:
            # Each cluster's differences cancel, so the sandwich estimate is 0 although items differ:
            # a zero that would make any margin "equivalent". TOST keeps the item-level (CLT) SE.
            tost_se = se
            notes.append("the cluster-robust SE is 0 (every cluster's differences cancel) while items differ: "
                         "TOST uses the CLT SE instead")

    n01 = n10 = table = None
    if binary and mcnemar is not False:
        from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

        n01, n10 = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
        table = [[int(((a == 1) & (b == 1)).sum()), n01], [n10, int(((a == 0) & (b == 0)).sum())]]
        exact = 1.0 if n01 + n10 == 0 else float(sm_mcnemar(table, exact=True).pvalue)
        mid = float(mcnemar_p(n01, n10)[1])
        detail = f"{a_name} only: {n01}, {b_name} only: {n10}"
        rows.append(_row("McNemar exact", diff, None, None, None, exact, detail))
        rows.append(_row("McNemar mid-p", diff, None, None, None, mid, detail))
        if n01 + n10 > 0:  # the asymptotic tests a textbook prints: Agresti's (uncorrected) and R's default
            for quantity, corrected in (("McNemar chi-square", False), ("McNemar chi-square (corrected)", True)):
                chi = sm_mcnemar(table, exact=False, correction=corrected)
                rows.append(_row(quantity, diff, None, None, None, float(chi.pvalue),
                                 f"{detail}; chi2 = {float(chi.statistic):.3f}, df = 1"))
        if n01 + n10 == 0:
            notes.append("no discordant items: McNemar p = 1")
    elif mcnemar:
        raise ValueError("McNemar needs 0/1 outcomes; got float scores (use the CLT/bootstrap rows)")
    elif mcnemar is None:
        notes.append(
            "outcomes are not all 0/1: McNemar skipped (CLT, cluster and bootstrap rows still apply)"
        )

    if n_boot > 0:
        boot = _boot_diffs(d, codes, n_boot, np.random.default_rng(seed))
        lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2])
        unit = "clusters" if codes is not None else "items"
        rows.append(
            _row(
                "difference (bootstrap)",
                diff,
                boot.std(ddof=1),
                lo,
                hi,
                None,
                f"percentile, {n_boot} resamples of {unit}",
            )
        )

    conclusion = None
    if margin is not None:
        if margin <= 0:
            raise ValueError(f"margin must be positive, got {margin}")
        df_t = df if codes is not None else n - 1
        t1 = stats.t.ppf(1 - alpha, df_t)
        lo_t, hi_t = diff - t1 * tost_se, diff + t1 * tost_se
        if se == 0:
            units = df + 1 if codes is not None else n  # clusters, or items
            p_t = float(tost_p(diff, 0.0, margin, df_t, units=units))
            notes.append(_no_variation_note(diff, margin, units, codes is not None))
            # the interval that matches p_t: the exact one-sided bound on the share of differing items
            bound = 1 - alpha ** (1 / units) if diff == 0 else None
            lo_t, hi_t = (None, None) if bound is None else (diff - bound, diff + bound)
        elif codes is None:
            from statsmodels.stats.weightstats import ttost_paired

            p_t = float(ttost_paired(b, a, -margin, margin)[0])
        else:
            p_t = float(tost_p(diff, tost_se, margin, df_t))
        conclusion = f"equivalent within ±{margin:g}" if p_t < alpha else "cannot claim equivalence"
        rows.append(_row(f"TOST ±{margin:g}", diff, tost_se, lo_t, hi_t, p_t, conclusion))
        notes.append(
            f"TOST CI is the {100 * (1 - 2 * alpha):g}% interval; equivalence iff it lies in ±{margin:g}"
        )

    n_info = {"items": n}
    if codes is not None:
        n_info["clusters"] = int(codes.max()) + 1
    if n01 is not None:
        n_info["discordant"] = n01 + n10
    return PairedResult(
        title=f"Paired comparison: {b_name} vs {a_name}",
        method="paired difference; McNemar (statsmodels); cluster-robust SE (Miller 2024)",
        n=n_info,
        rows=rows,
        notes=notes,
        extra={
            "a_name": a_name,
            "b_name": b_name,
            "margin": margin,
            "conclusion": conclusion,
            "items": items,
            "table": table,
        },
    )


def _no_variation_note(diff: float, margin: float, units: int, clustered: bool) -> str:
    what = "clusters" if clustered else "items"
    if diff == 0:
        return (f"no item differs: TOST p is the exact bound (1 - {margin:g})^{units} over {units} {what}, "
                f"not a t test on SE 0")
    return "every paired difference is the same: no variation to test equivalence on, TOST p = 1"


def _frame(rows):
    import pandas as pd

    if isinstance(rows, pd.DataFrame):
        return rows
    rows = [r.row() if hasattr(r, "row") else dict(r) for r in rows]
    return pd.DataFrame(rows)


def paired_from_rows(
    rows,
    config_col: str,
    baseline,
    variant,
    item_cols,
    outcome: str = "success",
    cluster_col: str | None = None,
    **kw,
) -> PairedResult:
    """`paired_comparison` on tidy rows (list of dicts or a DataFrame), pairing by `item_cols`.

    E.g. the runner's episode rows with item_cols=("env", "horizon", "seed", "trial"). Items seen in
    only one configuration, or more than once in one, are a ValueError: silently dropping them would
    bias the comparison.
    """
    df = _frame(rows)
    item_cols = [item_cols] if isinstance(item_cols, str) else list(item_cols)
    need = [config_col, outcome, *item_cols] + ([cluster_col] if cluster_col else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(f"rows lack columns {missing}; they have {list(df.columns)}")
    if cluster_col:  # keep a copy: the cluster may also be an item column, which set_index consumes
        df = df.assign(_cluster=df[cluster_col])
    sides = {}
    for name in (baseline, variant):
        part = df[df[config_col] == name]
        if part.empty:
            raise ValueError(
                f"no rows with {config_col} == {name!r}; configs present: "
                f"{sorted(df[config_col].unique().tolist(), key=str)}"
            )
        dup = part.duplicated(item_cols, keep=False)
        if dup.any():
            ex = part.loc[dup, item_cols].iloc[0].to_dict()
            raise ValueError(
                f"{int(part[dup].drop_duplicates(item_cols).shape[0])} items appear more than once "
                f"for {name!r}, e.g. {ex}"
            )
        if part[outcome].isna().any():
            raise ValueError(f"{int(part[outcome].isna().sum())} missing {outcome!r} values for {name!r}")
        sides[name] = part.set_index(item_cols)
    base, var = sides[baseline], sides[variant]
    only_b, only_v = base.index.difference(var.index), var.index.difference(base.index)
    if len(only_b) or len(only_v):
        ex = (only_b if len(only_b) else only_v)[0]
        raise ValueError(
            f"unpaired items: {len(only_b)} only in {baseline!r}, {len(only_v)} only in "
            f"{variant!r}, e.g. {dict(zip(item_cols, ex if isinstance(ex, tuple) else (ex,), strict=True))}"
        )
    base = base.sort_index()
    var = var.loc[base.index]
    clusters = None
    if cluster_col:
        if not (base["_cluster"].to_numpy() == var["_cluster"].to_numpy()).all():
            raise ValueError(
                f"{cluster_col!r} differs between {baseline!r} and {variant!r} for the same item"
            )
        clusters = base["_cluster"].astype(str).to_numpy()
    kw.setdefault("a_name", str(baseline))
    kw.setdefault("b_name", str(variant))
    return paired_comparison(
        base[outcome].astype(float).to_numpy(),
        var[outcome].astype(float).to_numpy(),
        clusters=clusters,
        items=list(base.index),
        **kw,
    )
