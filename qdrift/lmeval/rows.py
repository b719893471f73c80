"""Tidy per-item rows from lm-eval's logged samples, ready for item-by-item pairing between specs.

One row per (task, filter, doc_id): whether the item was answered correctly, and for
multiple-choice items the loglikelihood of every choice, the gold choice's raw loglikelihood and
its log-probability among the choices (softmax over the choices' loglikelihoods), which
`compare_short_form` turns into continuous measures. Loglikelihood requests are one forward pass
without a KV cache: rows say so (`kv_exercised`), and carry a `note` when the spec has a KV part.
"""

from __future__ import annotations

import math
from typing import Any

LOGLIKELIHOOD_TYPES = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")
KV_NOTE = ("KV-cache part of the spec not exercised: loglikelihood scoring is one forward pass "
           "without a cache, so these results are those of the spec without its KV part")
CORRECT_METRICS = ("acc", "exact_match", "em", "acc_norm")


def _log_softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    lse = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - lse for x in xs]


def _mc_fields(sample: dict[str, Any]) -> dict[str, Any]:
    lls = [float(r[0]) for r in sample["filtered_resps"]]
    gold = sample["target"]
    pred = max(range(len(lls)), key=lls.__getitem__)
    logp = _log_softmax(lls)
    out = {"pred": pred, "choice_loglik": lls, "choice_logprob": logp, "gold": None, "gold_loglik": None,
           "gold_logprob": None}
    if isinstance(gold, int) and not isinstance(gold, bool) and 0 <= gold < len(lls):
        out.update(gold=gold, gold_loglik=lls[gold], gold_logprob=logp[gold])
    return out


def _first_pair(sample: dict[str, Any]) -> tuple:
    """The (log-likelihood, is_greedy) pair of a loglikelihood sample's filtered response."""
    resp = sample["filtered_resps"]
    while isinstance(resp, (list, tuple)) and resp and isinstance(resp[0], (list, tuple)):
        resp = resp[0]
    return tuple(resp)


def _answer(sample: dict[str, Any]) -> str:
    resp = sample["filtered_resps"]
    while isinstance(resp, (list, tuple)) and resp:
        resp = resp[0]
    return str(resp)


def rows_from_samples(
    task: str,
    samples: list[dict[str, Any]],
    output_type: str,
    *,
    model: str = "",
    spec: str = "w16-a16-kv:16",
    spec_hash: str = "",
) -> list[dict[str, Any]]:
    """Rows of one task's logged samples (`results["samples"][task]` with `log_samples=True`)."""
    from qdrift.spec import QuantSpec

    has_kv = not QuantSpec.parse(spec).kv.is_noop
    exercised = output_type not in LOGLIKELIHOOD_TYPES
    rows = []
    for s in samples:
        metric = next((m for m in CORRECT_METRICS if m in s), None)
        row = {
            "task": task, "filter": s.get("filter", "none"), "doc_id": int(s["doc_id"]),
            "model": model, "spec": spec, "spec_hash": spec_hash, "output_type": output_type,
            "correct": float(s[metric]) if metric is not None else None, "metric": metric,
            "prompt_hash": s.get("prompt_hash"), "kv_exercised": exercised,
            "note": KV_NOTE if has_kv and not exercised else None,
        }
        if output_type == "multiple_choice":
            row.update(_mc_fields(s))
            row["answer"] = str(row["pred"])
            if "acc_norm" in s:
                row["acc_norm"] = float(s["acc_norm"])
        elif output_type == "loglikelihood":
            # lm-eval's answer to a loglikelihood request is whether the continuation is the greedy one
            # (what `acc` scores), not the log-likelihood, which any quantization moves
            row["answer"] = str(bool(_first_pair(s)[1]))
            row["target"] = str(s.get("target"))
        elif output_type == "loglikelihood_rolling":
            row["answer"] = None  # a perplexity has no discrete answer to flip
            row["target"] = str(s.get("target"))
        else:
            row["answer"] = _answer(s)
            row["target"] = str(s.get("target"))
        rows.append(row)
    return rows


def rows_from_results(results: dict[str, Any], *, model: str = "", spec: str = "w16-a16-kv:16",
                      spec_hash: str = "") -> list[dict[str, Any]]:
    """Rows of every task in lm-eval's results dict (run with `log_samples=True`)."""
    if "samples" not in results:
        raise ValueError("results hold no 'samples': run lm-eval with log_samples=True")
    rows = []
    for task, samples in results["samples"].items():
        output_type = results["configs"][task]["output_type"]
        rows.extend(rows_from_samples(task, samples, output_type, model=model, spec=spec, spec_hash=spec_hash))
    return rows
