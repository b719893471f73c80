"""Replay a request file against the reference (R times) and each endpoint, resumably; then analyse.

Every replay appends to its own JSONL journal under `<out>/journals/` (`reference.r<k>.jsonl`,
`endpoint-<name>.jsonl`), so a killed run picks up where it stopped and never resends a request
that already succeeded. Beside each journal, `<journal>.meta.json` records the endpoint (URL,
model) and a hash of the request bodies; a rerun with another endpoint or other requests is refused
instead of reusing answers that belong to a different run. A failed request stays a failed outcome (and is resent on the next run);
it is counted in the report, not dropped silently.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qdrift.backends.endpoint import ChatEndpoint, replay
from qdrift.verify.metrics import ResponseScore, run_summary, score_run
from qdrift.verify.requests import VerifyRequest
from qdrift.verify.stats import VerifyComparison, compare_to_reference, noise_floor

_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"endpoint name {name!r} must be letters, digits, '_', '.' or '-' (it names a journal file)")
    return name


def journal_path(out_dir: Path, name: str, repeat: int | None = None) -> Path:
    """Where one replay's journal lives: the reference's per repeat, each endpoint's once."""
    file = f"reference.r{repeat}.jsonl" if repeat is not None else f"endpoint-{check_name(name)}.jsonl"
    return Path(out_dir) / "journals" / file


def _identity(endpoint: ChatEndpoint, bodies: list[tuple[str, dict]]) -> dict[str, Any]:
    """What a journal's answers belong to: the endpoint (URL and model where it has them) and a hash
    of the exact request bodies sent."""
    described = endpoint.describe() if hasattr(endpoint, "describe") else {}
    who = {k: described[k] for k in ("base_url", "model") if k in described} or {"name": endpoint.name}
    digest = hashlib.sha256(json.dumps(bodies, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {**who, "bodies_sha256": digest}


def _check_journal(journal: Path, identity: dict[str, Any]) -> None:
    """Resume a journal only for the endpoint and requests it was written for (its `.meta.json`)."""
    meta = journal.with_name(journal.name + ".meta.json")
    if meta.exists():
        was = json.loads(meta.read_text(encoding="utf-8"))
        changed = sorted(k for k in {*was, *identity} if was.get(k) != identity.get(k))
        if changed:
            raise ValueError(
                f"{journal} holds answers for other {', '.join(changed)} ({', '.join(f'{k}={was.get(k)!r}' for k in changed)}; "
                f"now {', '.join(f'{k}={identity.get(k)!r}' for k in changed)}); reusing them would mix two runs. "
                f"Write to a new --out, or delete the journal to replay it")
        return
    if journal.exists() and journal.stat().st_size:
        raise ValueError(f"{journal} has no record of the endpoint and requests it was written for (no "
                         f"{meta.name}), so it cannot be resumed safely; write to a new --out or delete it")
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def replay_scores(endpoint: ChatEndpoint, requests: list[VerifyRequest], journal: Path, model: str | None = None,
                  overrides: dict[str, Any] | None = None, concurrency: int = 4) -> list[ResponseScore]:
    """Send the requests not yet answered in `journal` and score every request's latest outcome.

    The journal is resumed only for the same endpoint (URL, model) and the same request bodies.
    """
    bodies = [(r.id, r.prepared(model, overrides)) for r in requests]
    _check_journal(Path(journal), _identity(endpoint, bodies))
    return score_run(requests, replay(endpoint, bodies, journal, concurrency=concurrency))


@dataclass
class VerifyRun:
    """Scores of every run over one request list."""

    requests: list[VerifyRequest]
    reference_name: str
    reference_runs: list[list[ResponseScore]]
    endpoints: dict[str, list[ResponseScore]] = field(default_factory=dict)


def verify_endpoints(requests: list[VerifyRequest], reference: tuple[str, ChatEndpoint],
                     endpoints: dict[str, ChatEndpoint], out_dir: str | Path, repeats: int = 3,
                     model: str | None = None, overrides: dict[str, Any] | None = None,
                     concurrency: int = 4) -> VerifyRun:
    """Replay `requests` `repeats` times against the reference and once against each endpoint."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    ref_name, ref = reference
    for name in (ref_name, *endpoints):
        check_name(name)
    if ref_name in endpoints:
        raise ValueError(f"the reference {ref_name!r} is also listed as an endpoint; give endpoints other names")
    out_dir = Path(out_dir)
    runs = [replay_scores(ref, requests, journal_path(out_dir, ref_name, k), model, overrides, concurrency)
            for k in range(1, repeats + 1)]
    scores = {name: replay_scores(ep, requests, journal_path(out_dir, name), model, overrides, concurrency)
              for name, ep in endpoints.items()}
    return VerifyRun(requests, ref_name, runs, scores)


@dataclass
class VerifyAnalysis:
    """Everything the report shows: per-run counts, the noise floor and each endpoint's comparison."""

    run: VerifyRun
    summaries: dict[str, dict[str, Any]]
    floor: Any  # a Result, or None with one reference run
    comparisons: dict[str, VerifyComparison]
    margin: float | None
    alpha: float


def analyse(run: VerifyRun, margin: float | None = None, alpha: float = 0.05, n_boot: int = 2000,
            seed: int = 0) -> VerifyAnalysis:
    summaries = {f"{run.reference_name} (run {k})": run_summary(s) for k, s in enumerate(run.reference_runs, 1)}
    summaries.update({name: run_summary(s) for name, s in run.endpoints.items()})
    floor = noise_floor(run.reference_runs, alpha, n_boot, seed) if len(run.reference_runs) >= 2 else None
    comparisons = {name: compare_to_reference(s, run.reference_runs, name, margin, alpha, n_boot, seed)
                   for name, s in run.endpoints.items()}
    return VerifyAnalysis(run, summaries, floor, comparisons, margin, alpha)
