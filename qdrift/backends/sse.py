"""Reassemble a streamed chat completion (server-sent events) into one chat-completion response.

Written by hand because the only library that does this for OpenAI streams is the `openai`
package (its ChatCompletionStreamState), which qdrift does not depend on; the rules followed are
OpenAI's: each event is `data: {chunk}`, the stream ends with `data: [DONE]`, content deltas are
concatenated, and tool-call deltas are merged by their `index` (id and type arrive once, the
function name and the argument string arrive in pieces).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator


class StreamError(Exception):
    """The stream broke the protocol; `reason` is one of the endpoint failure reasons."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def sse_data(lines: Iterable[str]) -> Iterator[str]:
    """The `data` payload of each event; multi-line data fields are joined with newlines."""
    data: list[str] = []
    for line in lines:
        if line == "":
            if data:
                yield "\n".join(data)
                data = []
            continue
        if line.startswith(":"):  # a comment (keep-alive)
            continue
        field, _, value = line.partition(":")
        if field == "data":
            data.append(value[1:] if value.startswith(" ") else value)
        # "event", "id" and "retry" fields carry nothing a chat completion needs
    if data:
        yield "\n".join(data)


def _choice(choices: dict[int, dict], index: int) -> dict:
    return choices.setdefault(index, {"index": index, "message": {"role": "assistant", "content": None},
                                      "finish_reason": None, "logprobs": None, "_calls": {}})


def _merge_call(calls: dict[tuple[int, int], dict], delta: dict) -> None:
    """Add one streamed tool-call piece. Pieces are keyed by their `index`, but some servers (SGLang,
    Ollama, NVIDIA Dynamo) send every parallel call with index 0: a piece that brings a different id,
    or a name when the open call already has a name and arguments, starts a new call."""
    index = delta.get("index", len({i for i, _ in calls}))
    open_keys = [k for k in calls if k[0] == index]
    slot = calls[open_keys[-1]] if open_keys else None
    fn = delta.get("function") or {}
    if slot is not None and (
            (delta.get("id") and slot["id"] and delta["id"] != slot["id"])
            or (not delta.get("id") and fn.get("name") and slot["function"]["name"] and slot["function"]["arguments"])):
        slot = None
    if slot is None:
        slot = calls[(index, len(open_keys))] = {"id": None, "type": "function",
                                                 "function": {"name": "", "arguments": ""}}
    if delta.get("id"):
        slot["id"] = delta["id"]
    if delta.get("type"):
        slot["type"] = delta["type"]
    for key in ("name", "arguments"):
        if isinstance(fn.get(key), str):
            slot["function"][key] += fn[key]


def assemble_stream(payloads: Iterable[str]) -> dict:
    """One chat-completion dict from the stream's data payloads; StreamError when it is broken.

    Reasons: "malformed_json" (a payload that is not a JSON object), "stream_error" (the server
    sent an error object inside the stream), "truncated_stream" (no `[DONE]` at the end).
    """
    head: dict = {"object": "chat.completion"}
    choices: dict[int, dict] = {}
    usage = None
    n = 0
    for payload in payloads:
        if payload.strip() == "[DONE]":
            break
        n += 1
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError as e:
            raise StreamError("malformed_json", f"stream event {n} is not JSON: {e.msg} at char {e.pos}") from None
        if not isinstance(chunk, dict):
            raise StreamError("malformed_json", f"stream event {n} is a JSON {type(chunk).__name__}, not an object")
        if "error" in chunk:
            # Not shortened here: the client scrubs the API key from the whole text, then shortens it.
            raise StreamError("stream_error", f"the server reported an error in the stream: {chunk['error']}")
        for key in ("id", "created", "model", "system_fingerprint"):
            if key in chunk:
                head.setdefault(key, chunk[key])
        usage = chunk.get("usage") or usage
        for ch in chunk.get("choices") or []:
            c = _choice(choices, ch.get("index", 0))
            delta = ch.get("delta") or {}
            if delta.get("role"):
                c["message"]["role"] = delta["role"]
            if isinstance(delta.get("content"), str):
                c["message"]["content"] = (c["message"]["content"] or "") + delta["content"]
            for call in delta.get("tool_calls") or []:
                if not isinstance(call, dict) or isinstance(call.get("index", 0), bool) \
                        or not isinstance(call.get("index", 0), int):
                    raise StreamError("malformed_json", f"stream event {n} has a tool call piece that is not an "
                                      f"object with an integer index: {str(call)[:100]}")
                _merge_call(c["_calls"], call)
            logprobs = (ch.get("logprobs") or {}).get("content")
            if logprobs:
                c["logprobs"] = {"content": (c["logprobs"] or {"content": []})["content"] + list(logprobs)}
            if ch.get("finish_reason") is not None:
                c["finish_reason"] = ch["finish_reason"]
    else:
        raise StreamError("truncated_stream", f"the stream ended after {n} events without data: [DONE]")
    out = []
    for index in sorted(choices):
        c = choices[index]
        calls = c.pop("_calls")
        if calls:
            c["message"]["tool_calls"] = [calls[i] for i in sorted(calls)]
        out.append(c)
    return {**head, "choices": out, "usage": usage}
