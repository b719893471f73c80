"""In-process chat endpoints for tests: they answer from each request's expected call, with seeded noise."""

from __future__ import annotations

import json
import random
import threading
from collections import Counter

from qdrift.backends.endpoint import Outcome


class Killed(RuntimeError):
    """Raised by a fake endpoint to stand for a process killed mid-replay."""


def tool_response(calls: list[tuple[str, str]], finish: str = "tool_calls") -> dict:
    return {"choices": [{"index": 0, "finish_reason": finish, "message": {
        "role": "assistant", "content": "", "tool_calls": [
            {"id": f"functions.{n}:{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)]}}]}


def text_response(text: str = "All done.", finish: str = "stop") -> dict:
    return {"choices": [{"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}]}


class FakeEndpoint:
    """Calls the expected tool with probability `p_call` (when one is expected), calls a tool anyway with
    probability `p_spurious` (when none is), and breaks the arguments' JSON with probability `p_invalid`.
    Each call to `complete` draws fresh noise (seeded by seed, request id and how often it was asked), so
    repeats of the same endpoint differ like repeated samples from a served model. `fingerprint` is put
    in every answer as `system_fingerprint` (a deployment); requests in `fail_ids` fail with a 500.
    """

    def __init__(self, name: str, expected: dict, seed: int = 0, p_call: float = 1.0, p_spurious: float = 0.0,
                 p_invalid: float = 0.0, fail_after: int | None = None, fingerprint: str | None = None,
                 fail_ids: frozenset = frozenset()):
        self.name, self.expected, self.seed = name, expected, seed
        self.p_call, self.p_spurious, self.p_invalid = p_call, p_spurious, p_invalid
        self.fail_after, self.fingerprint, self.fail_ids = fail_after, fingerprint, fail_ids
        self.asked: Counter = Counter()
        self.sent = 0
        self._lock = threading.Lock()

    def complete(self, body: dict, request_id: str) -> Outcome:
        out = self._complete(body, request_id)
        if out.ok and self.fingerprint is not None:
            out.response["system_fingerprint"] = self.fingerprint
        return out

    def _complete(self, body: dict, request_id: str) -> Outcome:
        assert "_qdrift" not in body, "metadata must be stripped before sending"
        with self._lock:
            if self.fail_after is not None and self.sent >= self.fail_after:
                raise Killed(f"{self.name} killed after {self.sent} requests")
            self.sent += 1
            k = self.asked[request_id]
            self.asked[request_id] += 1
        if request_id in self.fail_ids:
            return Outcome(request_id, False, None, 500, "http_500", 3, 0.0, "answered 500 three times")
        rng = random.Random(f"{self.seed}|{request_id}|{k}")
        want = self.expected[request_id]
        call = rng.random() < (self.p_call if want is not None else self.p_spurious)
        if not call:
            return Outcome(request_id, True, text_response(), 200, None, 1, 0.0)
        if want is None:
            tool = body["tools"][0]["function"]
            key = next(iter(tool["parameters"]["properties"]))
            name, args = tool["name"], {key: "k0"}
        else:
            name, args = want["name"], want["arguments"]
        text = json.dumps(args)
        if rng.random() < self.p_invalid:
            text = text[:-1]  # truncated JSON
        return Outcome(request_id, True, tool_response([(name, text)]), 200, None, 1, 0.0)


def expected_of(requests) -> dict:
    return {r.id: r.meta["expected"] for r in requests}
