"""Teacher-forced divergence: how far a variant model's next-token distribution drifts from the
baseline's along the baseline's own trajectory, at every generated token.

Success rates only move once an error flips an action; drift is measurable even where both models
succeed. A baseline run records the exact tokens fed at every step (`HFPolicy(record_tokens=True)`
keeps, per row and turn, the suffix fed before generating and the generated ids). The replay feeds
them to BOTH models in lockstep, in the same forwards the run made: each turn's suffix as one
multi-token (prefill-phase) forward, then every generated token alone (a decode-phase forward), so
a spec that quantizes prefill and decode differently, and the KV cache written along the way, are
exercised as in serving. Before each generated token it compares the two next-token distributions
(at temperature 1, whatever the run sampled with):

    kl           KL(p_base || p_var) in nats
    top1_agree   argmax p_base == argmax p_var (a disagreement is a flip)
    base_logprob / var_logprob   log-probability of the baseline's token under each model

    episodes, steps, traces = record_baseline(HFPolicy(model, tok, prompt, max_new_tokens=64), envs)
    rows = teacher_forced_drift(model, qdrift.quantize(copy.deepcopy(model), "w4g32-a16-kv:fp8e4m3@unit"), traces)
    summarize_drift(rows)   # mean KL, p99 KL, flip rate, per-step means
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from qdrift.backends.session import BatchSession
from qdrift.quant.compare import kl_divergence

# One episode's trace: per turn, (tokens fed before generating, generated token ids).
Trace = list[tuple[list[int], list[int]]]


@dataclass(frozen=True)
class TokenDrift:
    episode: int
    step: int
    token_index: int  # index of the token within the step's generated tokens
    kl: float  # KL(p_base || p_var), nats
    top1_agree: bool
    base_logprob: float  # log p_base(baseline token)
    var_logprob: float  # log p_var(baseline token)

    def row(self) -> dict:
        return asdict(self)


def record_baseline(policy, envs, *, first_id: int = 0, **kw):
    """Run `envs` with `policy` recording tokens; return (episode records, step records, traces).

    traces[i] is the trace of episode `first_id + i`, ready for `teacher_forced_drift`.
    """
    from qdrift.envs.runner import run_episodes

    policy.record_tokens = True
    episodes, steps = run_episodes(policy, envs, first_id=first_id, **kw)
    return episodes, steps, [list(t) for t in policy.token_trace]


def _flatten(trace: Trace) -> list[tuple[list[int], int | None, int, int]]:
    """(tokens to feed, generated token to score or None, step, token_index) in the order the run fed them.

    As in the run (BatchSession), a turn's last generated token is not fed on its own: it goes in
    front of the next turn's suffix, and the episode's last token is never fed.
    """
    out: list[tuple[list[int], int | None, int, int]] = []
    carry: list[int] = []
    for step, (fed, generated) in enumerate(trace):
        if carry or fed:
            out.append((carry + list(fed), None, step, -1))
        for i, tok in enumerate(generated):
            last = i == len(generated) - 1
            out.append(([] if last else [tok], tok, step, i))
        carry = list(generated[-1:])
    return out


def _pad_id(model) -> int:
    pad = getattr(model.config, "pad_token_id", None)
    return pad if isinstance(pad, int) else 0  # padding is masked out, so any valid id does


@torch.no_grad()
def teacher_forced_drift(baseline_model, variant_model, trajectory_chunks: list[Trace], *,
                         episodes: list[int] | None = None, batch_size: int | None = None) -> list[TokenDrift]:
    """Replay each trace through both models in lockstep; one TokenDrift row per generated token.

    `trajectory_chunks` is a list of traces (HFPolicy.token_trace); `episodes` names them (default
    0, 1, ...). Traces are replayed `batch_size` at a time (default: all in one batch) in two
    BatchSessions that receive identical forwards, so identical models give KL exactly 0.
    Rows come ordered by (episode, step, token_index).
    """
    traces = list(trajectory_chunks)
    ids = list(range(len(traces))) if episodes is None else list(episodes)
    if len(ids) != len(traces):
        raise ValueError(f"got {len(ids)} episode ids for {len(traces)} traces")
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer (or None: all traces in one batch), got {batch_size!r}")
    size = batch_size or max(len(traces), 1)
    rows: list[TokenDrift] = []
    for lo in range(0, len(traces), size):
        rows.extend(_replay(baseline_model, variant_model, traces[lo:lo + size], ids[lo:lo + size]))
    rows.sort(key=lambda r: (r.episode, r.step, r.token_index))
    return rows


def _replay(base_model, var_model, traces: list[Trace], ids: list[int]) -> list[TokenDrift]:
    queues = [_flatten(t) for t in traces]
    batch = len(queues)
    if batch == 0:
        return []
    for q, ep in zip(queues, ids, strict=True):
        if q and q[0][1] is not None:
            raise ValueError(f"trace of episode {ep} generates before anything was fed")
    base = BatchSession(base_model, batch, _pad_id(base_model))
    var = BatchSession(var_model, batch, _pad_id(var_model))
    pos = [0] * batch
    last: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    out: list[TokenDrift] = []
    while True:
        live = [r for r in range(batch) if pos[r] < len(queues[r])]
        if not live:
            return out
        # Generated tokens go one per forward (decode phase) and never share one with a suffix.
        decode = [r for r in live if queues[r][pos[r]][1] is not None]
        group = decode or live
        if decode:
            out.extend(_compare(decode, [queues[r][pos[r]] for r in decode], last, ids))
        chunks: list[list[int] | None] = [None] * batch
        for r in group:
            chunks[r] = queues[r][pos[r]][0] or None
        if any(chunks):
            phase = "decode" if decode else "prefill"  # generated tokens decode, fed suffixes prefill
            lb, lv = base.feed(chunks, phase), var.feed(chunks, phase)
            for r in group:
                if chunks[r]:
                    last[r] = (lb[r], lv[r])
        for r in group:
            pos[r] += 1


def _compare(rows, items, last, ids) -> list[TokenDrift]:
    lb = torch.stack([last[r][0] for r in rows]).double()
    lv = torch.stack([last[r][1] for r in rows]).double()
    logp_b, logp_v = torch.log_softmax(lb, dim=-1), torch.log_softmax(lv, dim=-1)
    kl = kl_divergence(logp_b, logp_v).clamp_min(0.0)  # (rounding can leave a hair below 0)
    agree = logp_b.argmax(-1) == logp_v.argmax(-1)
    toks = torch.tensor([tok for _, tok, _, _ in items], device=lb.device)
    at = torch.arange(len(rows), device=lb.device)
    base_lp, var_lp = logp_b[at, toks], logp_v[at, toks]
    return [TokenDrift(ids[r], step, index, float(kl[i]), bool(agree[i]), float(base_lp[i]), float(var_lp[i]))
            for i, (r, (_, _, step, index)) in enumerate(zip(rows, items, strict=True))]


def summarize_drift(rows: list[TokenDrift]) -> dict:
    """Mean KL, 99th-percentile KL, flip rate (1 - top-1 agreement), and the same means per step."""
    if not rows:
        return {"tokens": 0, "mean_kl": float("nan"), "p99_kl": float("nan"), "flip_rate": float("nan"),
                "per_step": []}
    kl = np.array([r.kl for r in rows], dtype=np.float64)
    flips = np.array([not r.top1_agree for r in rows], dtype=np.float64)
    steps = np.array([r.step for r in rows])
    per_step = []
    for s in np.unique(steps):
        sel = steps == s
        per_step.append({"step": int(s), "tokens": int(sel.sum()), "mean_kl": float(kl[sel].mean()),
                         "flip_rate": float(flips[sel].mean())})
    return {"tokens": len(rows), "mean_kl": float(kl.mean()), "p99_kl": float(np.percentile(kl, 99)),
            "flip_rate": float(flips.mean()), "per_step": per_step}


def drift_rows(baseline_model, variant_model, traces: list[Trace], seeds: list[int], *, first_id: int = 0,
               batch_size: int | None = None, **cols) -> list[dict]:
    """`teacher_forced_drift` as tidy rows: episode i of `traces` is `first_id + i`, each row carries its
    episode's seed and `cols` (horizon, config, ...), ready for qdrift.stats and the results store."""
    ids = [first_id + i for i in range(len(traces))]
    tokens = teacher_forced_drift(baseline_model, variant_model, traces, episodes=ids, batch_size=batch_size)
    return [{**t.row(), "seed": seeds[t.episode - first_id], **cols} for t in tokens]
