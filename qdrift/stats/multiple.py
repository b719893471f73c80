"""Multiple-comparison adjustment: many quantization configs x benchmarks make false alarms likely.

A thin wrapper over statsmodels' multipletests that accepts what the rest of qdrift.stats produces
(a dict name -> p, a list of p, or a list or dict of PairedResult) and returns a Result.
"""

from __future__ import annotations

import math

from statsmodels.stats.multitest import multipletests

from qdrift.stats.paired import PairedResult
from qdrift.stats.result import Result

METHODS = (
    "bonferroni",
    "sidak",
    "holm-sidak",
    "holm",
    "simes-hochberg",
    "hommel",
    "fdr_bh",
    "fdr_by",
    "fdr_tsbh",
    "fdr_tsbky",
)


def _p_of(result) -> tuple[float, str]:
    """The p-value a PairedResult stands for: its cluster-robust test when it was given clusters (McNemar
    treats items as independent), else McNemar exact for 0/1 outcomes, else the CLT difference."""
    for quantity, source in (("difference (cluster-robust)", "cluster-robust t"), ("McNemar exact", "McNemar exact"),
                             ("difference (CLT)", "CLT z")):
        row = next((r for r in result.rows if r["quantity"] == quantity), None)
        if row is not None and row["p_value"] is not None:
            return float(row["p_value"]), source
    raise ValueError(f"{result.title}: no difference test to adjust")


def _named(pvalues) -> tuple[list[str], list[float], str]:
    if isinstance(pvalues, dict):
        names, values = [str(k) for k in pvalues], list(pvalues.values())
    else:
        values = list(pvalues)
        names = None
    if values and all(isinstance(p, PairedResult) for p in values):
        if names is None:
            names = [p.title for p in values]
            if len(set(names)) != len(names):
                names = [f"{i}: {t}" for i, t in enumerate(names)]
        found = [_p_of(p) for p in values]
        sources = ", ".join(dict.fromkeys(src for _, src in found))
        return names, [p for p, _ in found], sources
    return names or [f"p{i}" for i in range(len(values))], [float(p) for p in values], "given"


def adjust(pvalues, method: str = "holm", alpha: float = 0.05) -> Result:
    """Adjusted p-values and reject flags (family-wise for holm/bonferroni, FDR for fdr_*)."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; valid: {', '.join(METHODS)}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    names, ps, source = _named(pvalues)
    if not ps:
        raise ValueError("no p-values to adjust")
    bad = [(n, p) for n, p in zip(names, ps, strict=True) if math.isnan(p) or not 0 <= p <= 1]
    if bad:
        raise ValueError(f"{len(bad)} p-values outside [0, 1] or NaN, e.g. {bad[0][0]}={bad[0][1]}")
    reject, p_adj, _, _ = multipletests(ps, alpha=alpha, method=method)
    rows = [
        {"name": n, "p_raw": p, "p_adjusted": float(q), "reject": bool(r)}
        for n, p, q, r in zip(names, ps, p_adj, reject, strict=True)
    ]
    return Result(
        title=f"Multiple testing: {method}",
        method=f"statsmodels multipletests ({method})",
        n={"tests": len(rows), "rejected": int(reject.sum())},
        rows=rows,
        notes=[f"alpha={alpha}; p-values: {source}"],
    )
