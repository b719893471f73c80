"""Tidy per-item rows from lm-eval's logged samples, ready for item-by-item pairing between specs.

One row per (task, filter, doc_id): whether the item was answered correctly, and for
multiple-choice items the loglikelihood of every choice, the gold choice's raw loglikelihood and
its log-probability among the choices (softmax over the choices' loglikelihoods), which
`compare_short_form` turns into continuous measures. Loglikelihood requests are one forward pass
without a KV cache, run as prefill: rows say so (`kv_exercised`), and carry a `note` when the spec
has a KV part or a decode part of its own, neither of which such scoring reaches. Generation rows carry
`gen_args_hash`, a hash of the request's generation arguments (until, max_gen_toks, temperature,
do_sample, ...), so that `compare_short_form` can refuse to pair runs with different settings.
"""

from __future__ import annotations

import hashlib
import json
import math
from numbers import Integral
from typing import Any

LOGLIKELIHOOD_TYPES = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")
KV_NOTE = ("KV-cache part of the spec not exercised: loglikelihood scoring is one forward pass "
           "without a cache, so these results are those of the spec without its KV part")
DECODE_NOTE = ("decode part of the spec not exercised: loglikelihood scoring runs every forward as prefill, "
               "so these results are those of the spec's prefill part")
CORRECT_METRICS = ("acc", "exact_match", "em", "acc_norm")


def _log_softmax(xs: list[float]) -> list[float]:
    m = max(xs)
    lse = m + math.log(sum(math.exp(x - m) for x in xs))
    return [x - lse for x in xs]


def _choices(sample: dict[str, Any], n: int, target_delimiter: str) -> list[str] | None:
    """The choice texts of a multiple-choice sample, from its requests' continuations
    (`target_delimiter` + choice, as lm-eval builds them); None when the sample does not log them."""
    args = sample.get("arguments")
    if not isinstance(args, (list, tuple)) or len(args) < n:
        return None
    conts = [a[1] if isinstance(a, (list, tuple)) and len(a) == 2 else None for a in args[:n]]
    if not all(isinstance(c, str) for c in conts):
        return None
    return [c.removeprefix(target_delimiter) for c in conts]


def _gold_index(gold: Any, sample: dict[str, Any], n: int, target_delimiter: str) -> int | None:
    """The gold choice's index as lm-eval's process_results reads the target: an index, or a choice
    text mapped by `choices.index(gold)`; None where lm-eval has no valid gold either."""
    if isinstance(gold, Integral) and not isinstance(gold, bool):
        return int(gold) if 0 <= gold < n else None
    if isinstance(gold, str):
        choices = _choices(sample, n, target_delimiter)
        if choices is not None and gold in choices:
            return choices.index(gold)
    return None


def _mc_fields(sample: dict[str, Any], target_delimiter: str = " ") -> dict[str, Any]:
    lls = [float(r[0]) for r in sample["filtered_resps"]]
    pred = max(range(len(lls)), key=lls.__getitem__)
    logp = _log_softmax(lls)
    out = {"pred": pred, "choice_loglik": lls, "choice_logprob": logp, "gold": None, "gold_loglik": None,
           "gold_logprob": None}
    gold = _gold_index(sample["target"], sample, len(lls), target_delimiter)
    if gold is not None:
        out.update(gold=gold, gold_loglik=lls[gold], gold_logprob=logp[gold])
    return out


def gen_args_hash(sample: dict[str, Any]) -> str | None:
    """sha256 (16 hex) of a generation sample's generation arguments (the dict of each request), or None
    when it logs none: two runs asked with different settings must not be paired."""
    args = sample.get("arguments")
    if not isinstance(args, (list, tuple)):
        return None
    kwargs = [a[1] for a in args if isinstance(a, (list, tuple)) and len(a) >= 2 and isinstance(a[1], dict)]
    if not kwargs:
        return None
    return hashlib.sha256(json.dumps(kwargs, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
    target_delimiter: str = " ",
) -> list[dict[str, Any]]:
    """Rows of one task's logged samples (`results["samples"][task]` with `log_samples=True`).

    `target_delimiter` is the task's (lm-eval's default " "): it separates a multiple-choice request's
    context from its choice, so a target given as the choice text can be mapped to its index."""
    from qdrift.spec import QuantSpec

    parsed = QuantSpec.parse(spec)
    exercised = output_type not in LOGLIKELIHOOD_TYPES
    notes = [] if exercised else [n for n, on in ((KV_NOTE, not parsed.kv.is_noop),
                                                  (DECODE_NOTE, parsed.phase_split)) if on]
    rows = []
    for s in samples:
        metric = next((m for m in CORRECT_METRICS if m in s), None)
        row = {
            "task": task, "filter": s.get("filter", "none"), "doc_id": int(s["doc_id"]),
            "model": model, "spec": spec, "spec_hash": spec_hash, "output_type": output_type,
            "correct": float(s[metric]) if metric is not None else None, "metric": metric,
            "prompt_hash": s.get("prompt_hash"), "kv_exercised": exercised,
            "gen_args_hash": gen_args_hash(s) if output_type == "generate_until" else None,
            "note": "; ".join(notes) or None,
        }
        if output_type == "multiple_choice":
            row.update(_mc_fields(s, target_delimiter))
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
        config = results["configs"][task]
        rows.extend(rows_from_samples(task, samples, config["output_type"], model=model, spec=spec,
                                      spec_hash=spec_hash, target_delimiter=config.get("target_delimiter", " ")))
    return rows
