"""The request file: JSONL, one chat-completion request body with tools per line.

This is the format of the public K2 Vendor Verifier's `samples.jsonl`: each line is a complete
request body (`messages`, `tools`, optionally `temperature`, `max_tokens`, ...), which its script
passes as is to `client.chat.completions.create(**body)`. As there, a message with role `_input` is
sent as `system`, and the served model name is set at send time.

qdrift's metadata for each request (its id and where it came from: environment, horizon, seed,
step and the oracle's expected call) lives beside the file, in `<name>.meta.jsonl` (`meta_path`),
one line per request with the sha256 of the body it describes, so the request file itself is
exactly what that script accepts (an extra key inside a body made the openai client refuse every
request). Files written by earlier qdrift versions, with the metadata inline under `_qdrift`, still
read. A line with no metadata gets the id `line<N>-<hash>` (its line number and a content hash),
so a journal keyed by id notices an edit.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

META_KEY = "_qdrift"
_ROLES = ("system", "user", "assistant", "tool", "developer", "_input")


@dataclass(frozen=True)
class VerifyRequest:
    """One request: its id, the body as written in the file, and qdrift's metadata (may be empty)."""

    id: str
    body: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    line: int = 0

    @property
    def tools(self) -> list[dict]:
        return self.body.get("tools") or []

    def prepared(self, model: str | None = None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The body to send: `_qdrift` removed, `_input` roles as `system`, model and overrides set."""
        body = sendable(self.body)
        if model is not None:
            body["model"] = model
        body.update(overrides or {})
        return body


def sendable(body: dict[str, Any]) -> dict[str, Any]:
    """A copy of a file's body as an endpoint must see it: `_qdrift` removed, `_input` roles as `system`."""
    out = copy.deepcopy({k: v for k, v in body.items() if k != META_KEY})
    for message in out.get("messages", []):
        if isinstance(message, dict) and message.get("role") == "_input":
            message["role"] = "system"
    return out


def content_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj` (sorted keys): equal bodies, equal hashes."""
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes, for cards and reports that name the data they used."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_body(body: Any, where: str) -> None:
    """ValueError naming `where` and the problem when `body` is not a request body with tools."""
    if not isinstance(body, dict):
        raise ValueError(f"{where}: a request must be a JSON object, got {type(body).__name__}")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: 'messages' must be a non-empty list of messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            role = m.get("role") if isinstance(m, dict) else m
            raise ValueError(f"{where}: messages[{i}] has role {role!r}; valid roles: {', '.join(_ROLES)}")
    tools = body.get("tools")
    if not isinstance(tools, list) or not tools:
        raise ValueError(f"{where}: 'tools' must be a non-empty list of function schemas "
                         "(a tool-call verifier needs tools to call)")
    names = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ValueError(f"{where}: tools[{i}] must look like "
                             '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
        params = fn.get("parameters", {"type": "object"})
        try:
            jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator).check_schema(params)
        except jsonschema.SchemaError as e:
            raise ValueError(f"{where}: tools[{i}] ({fn['name']}) parameters are not a valid JSON Schema: "
                             f"{e.message}") from None
        names.append(fn["name"])
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"{where}: tool names must be unique; repeated: {dup}")
    meta = body.get(META_KEY, {})
    if not isinstance(meta, dict):
        raise ValueError(f"{where}: '{META_KEY}' must be an object of metadata, got {type(meta).__name__}")


def meta_path(path: str | Path) -> Path:
    """Where the metadata of request file `path` lives: `r.jsonl` -> `r.meta.jsonl`."""
    path = Path(path)
    return path.with_name(f"{path.stem if path.suffix == '.jsonl' else path.name}.meta.jsonl")


def read_meta(path: Path) -> dict[int, dict]:
    """The sidecar's metadata by request line number (empty when there is no sidecar)."""
    side = meta_path(path)
    if not side.is_file():
        return {}
    found = {}
    for n, line in enumerate(side.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            found[int(row["line"])] = row
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            raise ValueError(f"{side}:{n}: not a metadata line (a JSON object with 'line', 'body_sha256' and "
                             "'meta')") from None
    return found


def read_requests(path: str | Path) -> list[VerifyRequest]:
    """Every request in the file, checked; errors name the line. Blank lines are skipped. Metadata
    comes from the sidecar `meta_path(path)` when there is one (each line checked against the body it
    describes), else from an inline `_qdrift` key."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"request file not found: {path}")
    sidecar = read_meta(path)
    out: list[VerifyRequest] = []
    seen: dict[str, int] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            body = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
        check_body(body, where)
        meta = dict(body.get(META_KEY, {}))
        if n in sidecar:
            if sidecar[n].get("body_sha256") != content_hash(body):
                raise ValueError(f"{where}: the body differs from the one {meta_path(path).name} describes (the "
                                 "request file was edited after its metadata was written); remake both with "
                                 "`qdrift verify make-requests`, or delete the .meta.jsonl to use the file without it")
            meta = {**dict(sidecar[n].get("meta") or {}), **meta}
        rid = meta.get("id") or f"line{n}-{content_hash(body)[:10]}"
        if not isinstance(rid, str):
            raise ValueError(f"{where}: {META_KEY}.id must be a string, got {rid!r}")
        if rid in seen:
            raise ValueError(f"{where}: request id {rid!r} already used on line {seen[rid]}; ids must be unique")
        seen[rid] = n
        out.append(VerifyRequest(rid, body, meta, n))
    if not out:
        raise ValueError(f"{path}: no requests (the file is empty)")
    return out


def write_requests(path: str | Path, requests: list[VerifyRequest]) -> Path:
    """Write the bodies as JSONL (nothing but request bodies) and their metadata, with the ids, to
    `meta_path(path)`; checked before writing."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines, metas = [], []
    for i, r in enumerate(requests):
        body = {k: v for k, v in r.body.items() if k != META_KEY}
        check_body(body, f"request {i} ({r.id})")
        lines.append(json.dumps(body, ensure_ascii=False, separators=(",", ":")))
        metas.append(json.dumps({"line": i + 1, "body_sha256": content_hash(body), "meta": {**r.meta, "id": r.id}},
                                ensure_ascii=False, separators=(",", ":")))
    ids = [r.id for r in requests]
    if len(set(ids)) != len(ids):
        raise ValueError(f"request ids must be unique; repeated: {sorted({i for i in ids if ids.count(i) > 1})[:5]}")
    meta_path(path).write_text("\n".join(metas) + "\n", encoding="utf-8")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
