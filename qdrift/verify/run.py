"""Replay a request file against the reference (R times) and each endpoint, resumably; then analyse.

Every replay appends to its own JSONL journal under `<out>/journals/` (`reference.r<k>.jsonl`,
`endpoint-<name>.jsonl`), so a killed run picks up where it stopped and never resends a request
that already succeeded. Beside each journal, `<journal>.meta.json` records the endpoint (URL,
model) and a hash of the request bodies; a rerun with another endpoint or other requests is refused
instead of reusing answers that belong to a different run. A failed request stays a failed outcome (and is resent on the next run);
it is counted in the report, not dropped silently.

A URL can be redeployed between a run and its resume, so the meta file also records the
`system_fingerprint`s the answers carry, and a run whose answers (one endpoint's, or the reference's
over all its repeats) carry more than one is refused unless accepted explicitly: otherwise the
report would analyse a mixture of two deployments. Answers without a fingerprint cannot be checked;
the report says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qdrift.backends.endpoint import (
    ChatEndpoint,
    check_journal,
    journal_identity,
    journal_meta_path,
    read_journal,
    replay,
)
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


# what the meta file records about the answers, beside the identity the journal is resumed for
_OBSERVED = ("system_fingerprints", "answers_without_fingerprint")


def fingerprints(journals: list[Path]) -> tuple[dict[str, int], int]:
    """({system_fingerprint: answers carrying it}, answers carrying none) over the journals' latest answers."""
    counts: dict[str, int] = {}
    without = 0
    for journal in journals:
        for o in read_journal(journal).values():
            if not o.ok:
                continue
            fp = o.response.get("system_fingerprint") if isinstance(o.response, dict) else None
            if isinstance(fp, str) and fp:
                counts[fp] = counts.get(fp, 0) + 1
            else:
                without += 1
    return dict(sorted(counts.items())), without


def _record_fingerprints(journal: Path) -> None:
    """Write the fingerprints the journal's answers carry into its `.meta.json` (kept beside the identity)."""
    meta = journal_meta_path(journal)
    if not meta.exists():
        return
    counts, without = fingerprints([journal])
    data = json.loads(meta.read_text(encoding="utf-8"))
    data.update(system_fingerprints=counts, answers_without_fingerprint=without)
    meta.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def check_fingerprints(name: str, journals: list[Path], allow_mixed: bool = False) -> tuple[dict[str, int], list[str]]:
    """(fingerprint counts, notes) of one endpoint's answers; a ValueError when they name several
    deployments and `allow_mixed` is not set (analysing them together would mix two servers)."""
    counts, without = fingerprints(journals)
    files = ", ".join(str(j) for j in journals)
    listed = ", ".join(f"{fp!r} ({n} answer{'s' * (n != 1)})" for fp, n in counts.items())
    notes = []
    if len(counts) > 1:
        if not allow_mixed:
            raise ValueError(
                f"{name}'s answers carry {len(counts)} system_fingerprints: {listed} (in {files}); the server was "
                f"redeployed between runs (or serves several builds), and one report over them would mix "
                f"deployments. Write to a new --out (or delete those journals) to replay against one deployment, "
                f"or pass --allow-mixed-fingerprints if these fingerprints are one deployment")
        notes.append(f"{name}: answers carry {len(counts)} system_fingerprints ({listed}), accepted with "
                     "--allow-mixed-fingerprints")
    if without:
        notes.append(f"{name}: no system_fingerprint in {without} answer(s), so a redeployment between runs cannot "
                     "be detected for them")
    return counts, notes


def replay_scores(endpoint: ChatEndpoint, requests: list[VerifyRequest], journal: Path, model: str | None = None,
                  overrides: dict[str, Any] | None = None, concurrency: int = 4,
                  progress: str | None = None) -> list[ResponseScore]:
    """Send the requests not yet answered in `journal` and score every request's latest outcome.

    The journal is resumed only for the same endpoint (URL, model) and the same request bodies; the
    fingerprints its answers carry are recorded in its meta file even when the replay is interrupted.
    """
    journal = Path(journal)
    bodies = [(r.id, r.prepared(model, overrides)) for r in requests]
    check_journal(journal, journal_identity(endpoint, bodies), observed=_OBSERVED, way_out="write to a new --out")
    try:
        outcomes = replay(endpoint, bodies, journal, concurrency=concurrency, progress=progress)
    finally:
        _record_fingerprints(journal)
    return score_run(requests, outcomes)


@dataclass
class VerifyRun:
    """Scores of every run over one request list."""

    requests: list[VerifyRequest]
    reference_name: str
    reference_runs: list[list[ResponseScore]]
    endpoints: dict[str, list[ResponseScore]] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, int]] = field(default_factory=dict)  # per endpoint (the reference: all runs)
    notes: list[str] = field(default_factory=list)


def verify_endpoints(requests: list[VerifyRequest], reference: tuple[str, ChatEndpoint],
                     endpoints: dict[str, ChatEndpoint], out_dir: str | Path, repeats: int = 3,
                     model: str | None = None, overrides: dict[str, Any] | None = None,
                     concurrency: int = 4, allow_mixed_fingerprints: bool = False,
                     progress: bool = False) -> VerifyRun:
    """Replay `requests` `repeats` times against the reference and once against each endpoint.

    Each endpoint's answers (the reference's over all its repeats) must carry one system_fingerprint,
    unless `allow_mixed_fingerprints`: checked before sending (a journal already mixed is refused at
    once) and after each endpoint's replay (a redeployment since the journal was written).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    ref_name, ref = reference
    for name in (ref_name, *endpoints):
        check_name(name)
    if ref_name in endpoints:
        raise ValueError(f"the reference {ref_name!r} is also listed as an endpoint; give endpoints other names")
    out_dir = Path(out_dir)
    journals = {ref_name: [journal_path(out_dir, ref_name, k) for k in range(1, repeats + 1)],
                **{name: [journal_path(out_dir, name)] for name in endpoints}}
    for name, paths in journals.items():
        check_fingerprints(name, paths, allow_mixed_fingerprints)
    def label(name: str) -> str | None:  # a bar per replay, named as its journal is
        return name if progress else None

    runs = [replay_scores(ref, requests, path, model, overrides, concurrency,
                          label(f"{ref_name} (run {k} of {repeats})"))
            for k, path in enumerate(journals[ref_name], 1)]
    found = {ref_name: check_fingerprints(ref_name, journals[ref_name], allow_mixed_fingerprints)}
    scores = {}
    for name, ep in endpoints.items():
        scores[name] = replay_scores(ep, requests, journals[name][0], model, overrides, concurrency, label(name))
        found[name] = check_fingerprints(name, journals[name], allow_mixed_fingerprints)
    return VerifyRun(requests, ref_name, runs, scores, {name: fp for name, (fp, _) in found.items()},
                     [note for _, notes in found.values() for note in notes])


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
