"""Continuous paired measures of a quantized model against its baseline on short-form tasks.

Accuracy hides most of what quantization changes: answers flip in both directions and cancel,
and confidence in the right answer drops long before the argmax moves (Dutta et al. 2024,
"Accuracy is Not All You Need"). Paired item by item on (task, filter, doc_id):
- accuracy difference: `qdrift.stats.paired_comparison` (CLT, cluster-robust by task when there
  are several, McNemar);
- flip rate: share of items whose answer changed (any output type), Wilson interval;
- multiple-choice only: KL(base || variant) between the answer distributions (softmax over the
  choices' loglikelihoods), with a percentile bootstrap interval (KL is skewed), and the change
  in the gold answer's log-probability among the choices, with a t interval.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

from qdrift.stats.paired import PairedResult, _frame, _row, paired_comparison
from qdrift.stats.result import Result

KEYS = ("task", "filter", "doc_id")
NEEDED = (*KEYS, "correct", "answer", "spec")


class ShortFormResult(Result):
    """Rows: accuracy and its paired difference, flip rate, mean KL, gold log-prob change."""

    def value(self, quantity: str) -> float:
        return self.row(quantity=quantity)["estimate"]

    @property
    def kl(self) -> float:
        return self.value("mean KL(base||variant) over choices")

    @property
    def flip_rate(self) -> float:
        """Share of items whose answer changed; nan when no item has a discrete answer (rolling loglikelihood)."""
        return self.value("flip rate") if any(r["quantity"] == "flip rate" for r in self.rows) else math.nan

    @property
    def accuracy(self) -> PairedResult:
        return self.extra["accuracy"]


def _pairs(base_rows, variant_rows):
    base, var = _frame(base_rows), _frame(variant_rows)
    for side, df in (("base", base), ("variant", var)):
        missing = [c for c in NEEDED if c not in df.columns]
        if missing:
            raise ValueError(f"{side} rows lack columns {missing}; they have {list(df.columns)}")
        if df.empty:
            raise ValueError(f"{side} rows are empty: nothing to compare")
        dup = df.duplicated(list(KEYS), keep=False)
        if dup.any():
            raise ValueError(f"{side} rows repeat items, e.g. {_item(df.loc[dup].iloc[0])}")
    merged = base.merge(var, on=list(KEYS), how="outer", suffixes=("_b", "_v"), indicator=True)
    lonely = merged[merged["_merge"] != "both"]
    if len(lonely):
        ex = lonely.iloc[0]
        raise ValueError(f"{len(lonely)} unpaired items (e.g. {_item(ex)}, "
                         f"only in {'base' if ex['_merge'] == 'left_only' else 'variant'}): run both on the same items")
    for col, what, needed in (
            ("prompt_hash", "different prompts", "same num_fewshot and task version needed"),
            ("gen_args_hash", "different generation arguments",
             "same gen_kwargs (until, max_gen_toks, temperature, do_sample, ...) and task version needed")):
        differ = _differ(merged, col)
        if differ.any():
            ex = merged.loc[differ].iloc[0]
            raise ValueError(f"{int(differ.sum())} items were asked with {what} (e.g. {_item(ex)}, "
                             f"{col} {ex[col + '_b']!r} in base, {ex[col + '_v']!r} in variant): {needed}")
    # An item scored on one side only would leave the paired accuracy while n counts it; it means the
    # two runs scored the task differently (another metric list or task version), so refuse, as for
    # unpaired items, rather than compare accuracies over a silently smaller set.
    one_side = merged["correct_b"].isna() != merged["correct_v"].isna()
    if one_side.any():
        items = [_item(r) for _, r in merged.loc[one_side].head(3).iterrows()]
        raise ValueError(f"{int(one_side.sum())} items are scored (correct) on one side only, e.g. {items}: "
                         "both runs need the same task version and metric list")
    return merged.sort_values(list(KEYS)).reset_index(drop=True)


def _differ(merged, col: str):
    """Items whose `col` differs between the sides; both missing (rows that do not record it) pair."""
    if f"{col}_b" not in merged:
        return merged["doc_id"] != merged["doc_id"]  # all False
    b, v = merged[f"{col}_b"], merged[f"{col}_v"]
    return (b != v) & ~(b.isna() & v.isna())


def _item(row) -> dict[str, Any]:
    return {k: (row[k].item() if hasattr(row[k], "item") else row[k]) for k in KEYS}


def _kl(p_log: list[float], q_log: list[float]) -> float:
    p, q = np.asarray(p_log, float), np.asarray(q_log, float)
    if p.shape != q.shape:
        raise ValueError(f"choice counts differ between base ({p.size}) and variant ({q.size})")
    return float(max(0.0, np.sum(np.exp(p) * (p - q))))


def _bootstrap_mean(x: np.ndarray, n_boot: int, alpha: float, seed: int) -> tuple[float, float]:
    if n_boot <= 0 or x.size < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    lo, hi = np.quantile(x[idx].mean(axis=1), [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def compare_short_form(base_rows, variant_rows, *, alpha: float = 0.05, n_boot: int = 2000,
                       seed: int = 0) -> ShortFormResult:
    """Paired accuracy, flip rate, KL and gold log-prob change of `variant_rows` against `base_rows`.

    Rows are those of `qdrift.lmeval.run_cell` / `rows_from_results`, one run per spec on the same
    items. Items present on one side only are a ValueError (dropping them would bias the result).
    """
    from statsmodels.stats.proportion import proportion_confint

    m = _pairs(base_rows, variant_rows)
    base_spec, var_spec = str(m["spec_b"].iloc[0]), str(m["spec_v"].iloc[0])
    n, notes, rows = len(m), [], []
    tasks = sorted(m["task"].unique())
    scored = m["correct_b"].notna() & m["correct_v"].notna()
    clusters = m.loc[scored, "task"].to_numpy() if len(tasks) >= 2 and m.loc[scored, "task"].nunique() >= 2 else None
    acc = paired_comparison(m.loc[scored, "correct_b"].to_numpy(float), m.loc[scored, "correct_v"].to_numpy(float),
                            clusters=clusters, alpha=alpha, n_boot=0, a_name="base", b_name="variant")
    for r in acc.rows:
        if r["quantity"] in ("accuracy base", "accuracy variant", "difference (CLT)",
                             "difference (cluster-robust)", "McNemar exact"):
            q = r["quantity"] if r["quantity"].startswith("accuracy") else f"accuracy {r['quantity']}"
            rows.append({**r, "quantity": q})

    answered = (m["answer_b"].notna() & m["answer_v"].notna()).to_numpy()  # rolling loglikelihood: no answer
    flips = np.where(answered, (m["answer_b"].astype(str) != m["answer_v"].astype(str)).to_numpy(float), np.nan)
    k, n_ans = int(np.nansum(flips)), int(answered.sum())
    if n_ans:
        rate = k / n_ans
        lo, hi = proportion_confint(k, n_ans, alpha=alpha, method="wilson")
        rows.append(_row("flip rate", rate, math.sqrt(rate * (1 - rate) / n_ans), lo, hi, None,
                         f"{k} of {n_ans} answers changed; Wilson"))
    if n_ans < n:
        notes.append(f"{n - n_ans} items have no discrete answer (loglikelihood_rolling): left out of the flip rate")

    per_item = m[list(KEYS)].copy()
    per_item["flip"] = flips
    # KL needs only the choices' log-probs; the gold log-prob change also needs a gold choice index
    mc = m["choice_logprob_b"].notna() & m["choice_logprob_v"].notna() if "choice_logprob_b" in m else None
    if mc is not None and mc.any():
        sub = m[mc]
        kl = np.array([_kl(b, v) for b, v in zip(sub["choice_logprob_b"], sub["choice_logprob_v"], strict=True)])
        se = float(kl.std(ddof=1) / math.sqrt(kl.size)) if kl.size > 1 else float("nan")
        blo, bhi = _bootstrap_mean(kl, n_boot, alpha, seed)
        rows.append(_row("mean KL(base||variant) over choices", kl.mean(), se, blo, bhi, None,
                         f"nats; percentile bootstrap, {n_boot} resamples of items"))
        per_item.loc[mc, "kl"] = kl
        gold = mc & m["gold_logprob_b"].notna() & m["gold_logprob_v"].notna() if "gold_logprob_b" in m else mc & False
        if gold.any():
            sub = m[gold]
            d = (sub["gold_logprob_v"] - sub["gold_logprob_b"]).to_numpy(float)
            dse = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else float("nan")
            t = stats.t.ppf(1 - alpha / 2, max(d.size - 1, 1))
            p = float(2 * stats.t.sf(abs(d.mean()) / dse, d.size - 1)) if dse and dse > 0 else None
            rows.append(_row("gold log-prob change", d.mean(), dse, d.mean() - t * dse, d.mean() + t * dse, p,
                             "variant - base, log softmax over choices; t interval"))
            per_item.loc[gold, "gold_logprob_change"] = d
        if int(gold.sum()) < int(mc.sum()):
            notes.append(f"{int(mc.sum() - gold.sum())} multiple-choice items have no gold choice index (the target "
                         "is neither an index nor one of the choices): left out of the gold log-prob change")
    else:
        notes.append("no multiple-choice items: KL and gold log-prob change need choice loglikelihoods")
    for col in ("note_b", "note_v"):
        if col in m:
            notes.extend(sorted({x for x in m[col].dropna() if x} - set(notes)))
    n_info = {"items": n, "tasks": len(tasks)}
    if mc is not None:
        n_info["mc_items"] = int(mc.sum())
    return ShortFormResult(
        title=f"Short-form comparison: {var_spec} vs {base_spec}",
        method="paired by (task, filter, doc_id); qdrift.stats.paired_comparison; Wilson; bootstrap",
        n=n_info, rows=rows, notes=notes + [f"accuracy: {note}" for note in acc.notes],
        extra={"accuracy": acc, "per_item": per_item, "base_spec": base_spec, "variant_spec": var_spec},
    )
