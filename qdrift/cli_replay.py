"""`qdrift replay`: send recorded chat-completion requests to an endpoint, journaling every outcome.

The requests file holds one JSON object per line: a chat-completions body, optionally with an
"id" (a string or integer; without one, the id qdrift's metadata gives it, from the `.meta.jsonl`
beside a file of `qdrift verify make-requests` or an older file's inline `_qdrift`, else the line
number). Such a file replays as is: `_input` roles are sent as `system` (and an inline `_qdrift`
is removed), exactly as `qdrift verify run` sends them. A rerun with
the same journal sends only what has not yet succeeded; the journal's `.meta.json` records the
endpoint and a hash of the requests, and a rerun with another endpoint or an edited file is refused.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from qdrift.verify.requests import META_KEY, read_meta, sendable


def read_requests(path: str | Path) -> list[tuple[str, dict]]:
    """(request id, body) per non-blank line; ValueError naming the line for anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"requests file {str(path)!r} does not exist")
    out: list[tuple[str, dict]] = []
    first_line: dict[str, int] = {}
    sidecar = read_meta(path)  # ids written by `qdrift verify make-requests` beside its file
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{n}: not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(obj, dict):
            raise ValueError(f"{path}:{n}: a request must be a JSON object (a chat-completions body), "
                             f"got a JSON {type(obj).__name__}")
        meta = obj.get(META_KEY)
        if meta is not None and not isinstance(meta, dict):
            raise ValueError(f"{path}:{n}: '{META_KEY}' must be an object of metadata, got {type(meta).__name__}")
        rid = obj.pop("id", (meta or sidecar.get(n, {}).get("meta") or {}).get("id", n))
        if isinstance(rid, bool) or not isinstance(rid, (str, int)) or str(rid) == "":
            raise ValueError(f"{path}:{n}: \"id\" must be a non-empty string or an integer, got {rid!r}")
        if not isinstance(obj.get("messages"), list) or not obj["messages"]:
            raise ValueError(f"{path}:{n}: the body needs a non-empty \"messages\" list")
        rid = str(rid)
        if rid in first_line:
            raise ValueError(f"{path}:{n}: id {rid!r} repeats the id on line {first_line[rid]}; ids must be unique")
        first_line[rid] = n
        out.append((rid, sendable(obj)))
    if not out:
        raise ValueError(f"requests file {str(path)!r} holds no requests")
    return out


def cmd_replay(args) -> int:
    from qdrift.backends.endpoint import check_journal, journal_identity, read_journal, replay
    from qdrift.backends.openai_client import OpenAIEndpoint

    if args.concurrency < 1:
        raise SystemExit(f"qdrift: --concurrency must be >= 1, got {args.concurrency}")
    try:
        requests = read_requests(args.requests)
        endpoint = OpenAIEndpoint(args.base_url, args.model, api_key_env=args.api_key_env,
                                  config_file=args.api_key_file, require_api_key=args.require_api_key,
                                  timeout_s=args.timeout, max_attempts=args.max_attempts)
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    journal = Path(args.journal)
    try:  # a journal is resumed only for the endpoint and requests it was written for
        check_journal(journal, journal_identity(endpoint, requests), way_out="give a new --journal")
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    before = read_journal(journal)
    already = sum(1 for rid, _ in requests if rid in before and before[rid].ok)
    print(f"endpoint: {endpoint.url} model {args.model} (auth: {endpoint.describe()['auth']})")
    print(f"requests: {len(requests)}; already succeeded in the journal: {already}; sending {len(requests) - already}")
    with endpoint:
        outcomes = replay(endpoint, requests, journal, concurrency=args.concurrency, progress="replay")
    counts = Counter("ok" if o.ok else o.reason for o in outcomes.values())
    for reason, n in sorted(counts.items(), key=lambda kv: (kv[0] != "ok", -kv[1], kv[0])):
        print(f"{reason:>20}  {n}")
    print(f"journal: {journal}")
    failed = len(outcomes) - counts.get("ok", 0)
    if counts.get("connection"):
        print(f"qdrift: {counts['connection']} request(s) could not connect to {endpoint.url}: is a server "
              "listening there? (see the journal's error field)")
    if failed:
        print(f"qdrift: {failed} request(s) failed; run the same command again to resend only those")
    return 1 if failed else 0


def add_parser(sub) -> None:
    p = sub.add_parser("replay", help="send recorded chat-completion requests to an endpoint; journaled, resumable")
    p.add_argument("--requests", required=True, help="JSON lines: one chat-completions body per line, optional \"id\" (a verify make-requests file works as is)")
    p.add_argument("--base-url", required=True, help="the endpoint's base URL, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="the served model's name (set as each body's \"model\")")
    p.add_argument("--journal", required=True, help="JSON lines of outcomes; a rerun resends only the failures")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at once (default 4)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds for connecting and for each read (default 60)")
    p.add_argument("--max-attempts", type=int, default=4, help="attempts per request, retries included (default 4)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY",
                   help="environment variable holding the API key (default OPENAI_API_KEY; unset means no key)")
    p.add_argument("--api-key-file", help="a JSON file {\"api_key\": \"...\"} instead of the environment variable")
    p.add_argument("--require-api-key", action="store_true", help="fail when no key is found instead of sending none")
    p.set_defaults(func=cmd_replay)
