"""The seam between qdrift and a chat-completions endpoint, and a resumable replay over it.

An endpoint is anything with `name` and `complete(body, request_id) -> Outcome`: an HTTP client
for an OpenAI-compatible server, or an in-process fake in tests. Every request ends as an Outcome,
a success or a failure with its reason, so nothing is dropped silently. `replay` sends many
requests with bounded concurrency and appends each outcome to a JSONL journal as it finishes; a
rerun reads the journal and sends only what has not yet succeeded.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Outcome:
    """How one request ended."""

    request_id: str
    ok: bool
    response: dict | None  # the parsed chat-completion body when ok
    status: int | None  # the last HTTP status seen; None when no response came (timeout, refused)
    reason: str | None  # why it failed: "timeout", "http_500", "http_429", "malformed_json", ...
    attempts: int
    latency_s: float
    error: str | None = None  # a human-readable detail of the failure (never holds a credential)

    def row(self) -> dict:
        return asdict(self)


class ChatEndpoint(Protocol):
    """One endpoint. `complete` never raises for a failed request: it returns a failed Outcome."""

    name: str

    def complete(self, body: dict, request_id: str) -> Outcome: ...


def _end_torn_line(journal: Path) -> None:
    """Close a torn last line (a killed run) so the next record starts on a line of its own instead
    of being glued onto the fragment and lost."""
    if journal.exists() and journal.stat().st_size:
        with journal.open("rb") as f:
            f.seek(-1, 2)
            torn = f.read(1) != b"\n"
        if torn:
            with journal.open("a", encoding="utf-8") as f:
                f.write("\n")


def read_journal(path: Path) -> dict[str, Outcome]:
    """The latest outcome per request id; a torn last line (a killed run) is ignored."""
    done: dict[str, Outcome] = {}
    if not Path(path).exists():
        return done
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[row["request_id"]] = Outcome(**row)
    return done


def journal_meta_path(journal: Path) -> Path:
    """Where a journal records what it was written for: `<journal>.meta.json`."""
    journal = Path(journal)
    return journal.with_name(journal.name + ".meta.json")


def journal_identity(endpoint: ChatEndpoint, bodies: list[tuple[str, dict]]) -> dict[str, Any]:
    """What a journal's answers belong to: the endpoint (URL and model where it has them) and a hash
    of the exact request bodies sent."""
    described = endpoint.describe() if hasattr(endpoint, "describe") else {}
    who = {k: described[k] for k in ("base_url", "model") if k in described} or {"name": endpoint.name}
    digest = hashlib.sha256(json.dumps(bodies, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {**who, "bodies_sha256": digest}


def check_journal(journal: Path, identity: dict[str, Any], observed: tuple[str, ...] = (),
                  way_out: str = "use a new journal") -> None:
    """Resume a journal only for the endpoint and requests it was written for (its `.meta.json`, written
    here on first use): answers of another endpoint or other requests returned as this run's would
    mix two runs. `observed`: keys the meta file also records about the answers, not compared."""
    journal = Path(journal)
    meta = journal_meta_path(journal)
    if meta.exists():
        was = {k: v for k, v in json.loads(meta.read_text(encoding="utf-8")).items() if k not in observed}
        changed = sorted(k for k in {*was, *identity} if was.get(k) != identity.get(k))
        if changed:
            raise ValueError(
                f"{journal} holds answers for other {', '.join(changed)} ({', '.join(f'{k}={was.get(k)!r}' for k in changed)}; "
                f"now {', '.join(f'{k}={identity.get(k)!r}' for k in changed)}); reusing them would mix two runs. "
                f"{way_out[0].upper() + way_out[1:]}, or delete the journal to replay it")
        return
    if journal.exists() and journal.stat().st_size:
        raise ValueError(f"{journal} has no record of the endpoint and requests it was written for (no "
                         f"{meta.name}), so it cannot be resumed safely; {way_out} or delete it")
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps(identity, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def replay(endpoint: ChatEndpoint, requests: Iterable[tuple[str, dict]], journal: Path,
           concurrency: int = 4, progress: str | None = None) -> dict[str, Outcome]:
    """Send every (request_id, body) not already answered in `journal`; return all outcomes by id.

    Failed requests are sent again on a rerun; successes never are. Ids must be unique. `progress`:
    a label for a progress bar on stderr (requests answered / total, failures, ETA), None for none.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    requests = list(requests)
    ids = [rid for rid, _ in requests]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"request ids must be unique; repeated: {dup}")
    journal = Path(journal)
    journal.parent.mkdir(parents=True, exist_ok=True)
    outcomes = read_journal(journal)
    _end_torn_line(journal)
    todo = [(rid, body) for rid, body in requests if not (rid in outcomes and outcomes[rid].ok)]
    lock = threading.Lock()
    bar = None
    if progress is not None:
        from tqdm import tqdm

        bar = tqdm(total=len(requests), initial=len(requests) - len(todo), desc=progress, unit="req",
                   file=sys.stderr, dynamic_ncols=True)
    failed = 0

    def one(item: tuple[str, dict]) -> None:
        nonlocal failed
        rid, body = item
        out = endpoint.complete(body, rid)
        with lock, journal.open("a", encoding="utf-8") as f:
            f.write(json.dumps(out.row()) + "\n")
            f.flush()
            outcomes[rid] = out
            if bar is not None:
                failed += not out.ok
                bar.update(1)
                if failed:
                    bar.set_postfix(failed=failed)

    try:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, todo))
    finally:
        if bar is not None:
            bar.close()
    return {rid: outcomes[rid] for rid in ids}
