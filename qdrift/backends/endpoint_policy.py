"""Any chat-completions endpoint as an agent policy for the episode runner.

The runner keeps conversations as raw assistant text and parses each turn with
`policy.prompt.parser`. An endpoint answers with structured `tool_calls` instead, so each answer
is rendered as the Hermes text a model would have written -- the content, then one
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block per call -- and read back
by the Hermes parser. Arguments that decode to a JSON object render exactly as
`HermesParser.render` writes them; argument strings that are not a JSON object are kept as a
string, so the parser scores them as a malformed call (never silently repaired).

What goes over the wire is the OpenAI shape, kept per row: the assistant message exactly as the
endpoint returned it (with its tool_calls and their ids), each tool result as a `tool` message
answering the first call's id, a note answering any further call in the same turn (the
environments run one call per step), and a tool result that follows a turn without a call as a
`user` message (there is no call id to answer).

A failed request is a scored failed step, not a crash: that turn's Generation has stop_reason
"endpoint_error" and `error` "<reason>: <detail>", and the episode's later turns are not sent
(the trajectory is already off the model's own path), each recorded with the same stop_reason.

Token counts come from the response's `usage` (-1 when the endpoint reports none); they count
the whole resent conversation, since what a server caches between requests is not visible.
`logprob` sums `choices[0].logprobs.content` when present, else NaN.
"""

from __future__ import annotations

import hashlib
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from qdrift.backends.endpoint import ChatEndpoint, Outcome
from qdrift.backends.generation import Generation
from qdrift.envs.parsers import HermesParser

ONE_CALL_PER_STEP = "not run: the environment runs one tool call per step"
_WIRE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")


@dataclass(frozen=True)
class EndpointPrompt:
    """What the runner needs of a prompt: the parser for the rendered assistant text."""

    parser: HermesParser = field(default_factory=HermesParser)
    prefilled: str = ""

    def describe(self) -> str:
        return "endpoint tools (OpenAI tool_calls), read back as hermes <tool_call> text"


def render_tool_call(call: dict) -> str:
    """One OpenAI tool call as Hermes text.

    `arguments` arrives JSON-encoded (the wire format), so it is decoded exactly once, whatever it
    holds: the text then carries the arguments as the model wrote them (an object; or a string, or
    null, which the parser takes leniently, as it does from a local model). Only arguments that are
    not JSON at all stay the raw string.
    """
    fn = call.get("function") or {}
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return "<tool_call>\n" + json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False) + "\n</tool_call>"


def assistant_text(message: dict) -> str:
    """The raw text the runner records for an assistant message: its content, then its calls."""
    parts = []
    content = message.get("content")
    if isinstance(content, str) and content.strip():
        parts.append(content.strip())
    parts.extend(render_tool_call(c) for c in message.get("tool_calls") or [])
    return "\n".join(parts)


def request_seed(policy_seed: int, episode_seed: int, turn: int) -> int:
    """The `seed` of one turn's request: a server draws each request from a fresh generator seeded
    with it, so one seed for every turn of an episode would replay the same random stream at each
    turn and correlate the turns' samples (a local sampler's stream runs on across turns instead).
    A hash of the three, below 2**31 so that servers taking 32-bit seeds accept it."""
    digest = hashlib.sha256(f"{policy_seed}/{episode_seed}/{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % 2**31


def _logprob(choice: dict) -> float:
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return math.nan
    return float(sum(t["logprob"] for t in content))


def _count(usage: dict, key: str) -> int:
    value = usage.get(key)
    return int(value) if isinstance(value, int) else -1


@dataclass
class EndpointPolicy:
    """Drive `endpoint` (any ChatEndpoint) through the runner's policy seam."""

    endpoint: ChatEndpoint
    temperature: float = 0.0
    seed: int = 0
    max_tokens: int | None = None
    logprobs: bool = False
    concurrency: int = 8  # requests in flight at once within one lockstep turn
    request_prefix: str = ""  # request ids are f"{prefix}r{row}-s{episode_seed}-t{turn}"
    prompt: EndpointPrompt = field(default_factory=EndpointPrompt)
    outcomes: list[Outcome] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1 or None, got {self.max_tokens}")

    def describe(self) -> dict:
        desc = getattr(self.endpoint, "describe", None)
        return {"backend": "endpoint", "endpoint": desc() if callable(desc) else self.endpoint.name,
                "tool_prompt": self.prompt.describe(), "temperature": self.temperature, "seed": self.seed,
                "max_tokens": self.max_tokens}

    def start(self, conversations: list[tuple[list[dict], list[dict]]], episode_seeds: list[int],
              policy_seeds: list[int] | None = None) -> None:
        """Begin a batch; row r's request at turn t carries `request_seed(policy seed, episode seed, t)`."""
        if policy_seeds is not None and len(policy_seeds) != len(conversations):
            raise ValueError(f"got {len(policy_seeds)} policy seeds for {len(conversations)} conversations")
        n = len(conversations)
        self._wire: list[list[dict]] = [[] for _ in range(n)]
        self._tools = [list(tools) for _, tools in conversations]
        self._seen = [0] * n
        self._turn = [0] * n
        self._episode_seeds = list(episode_seeds)
        bases = policy_seeds if policy_seeds is not None else [self.seed] * n
        self._bases = list(bases)
        self._failed: list[str | None] = [None] * n
        for r, (messages, _) in enumerate(conversations):
            self._wire[r] = [{k: v for k, v in m.items() if k in _WIRE_KEYS} for m in messages]
            self._seen[r] = len(messages)

    def extend(self, row: int, messages: list[dict], tools: list[dict]) -> None:
        """The conversation of `row` grew: the runner's copy of the assistant turn, then tool results."""
        self._tools[row] = list(tools)
        new = messages[self._seen[row]:]
        self._seen[row] = len(messages)
        wire = self._wire[row]
        pending = []
        if wire and wire[-1]["role"] == "assistant":
            pending = [c["id"] for c in wire[-1].get("tool_calls") or []]
        for m in new:
            if m["role"] == "assistant":
                continue  # already on the wire, as the endpoint returned it
            if m["role"] == "tool" and pending:
                wire.append({"role": "tool", "tool_call_id": pending.pop(0), "content": str(m.get("content", ""))})
            elif m["role"] == "tool":  # a result with no call to answer (the turn made none)
                wire.append({"role": "user", "content": str(m.get("content", ""))})
            else:
                wire.append({k: v for k, v in m.items() if k in _WIRE_KEYS})
        wire.extend({"role": "tool", "tool_call_id": cid, "content": ONE_CALL_PER_STEP} for cid in pending)

    def _body(self, row: int) -> dict:
        body = {"messages": [dict(m) for m in self._wire[row]], "temperature": self.temperature,
                "seed": request_seed(self._bases[row], self._episode_seeds[row], self._turn[row])}
        if self._tools[row]:
            body["tools"] = self._tools[row]
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        if self.logprobs:
            body["logprobs"] = True
        return body

    def respond(self, rows: list[int]) -> dict[int, Generation]:
        """Send each live row's conversation; a failed or skipped row gets an "endpoint_error" turn."""
        result: dict[int, Generation] = {}
        live = []
        for r in rows:
            if self._failed[r] is not None:
                result[r] = self._error(f"not sent: an earlier request of this episode failed ({self._failed[r]})")
            else:
                live.append(r)
        jobs = [(r, f"{self.request_prefix}r{r}-s{self._episode_seeds[r]}-t{self._turn[r]}", self._body(r)) for r in live]
        if jobs:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(jobs))) as pool:
                outs = list(pool.map(lambda job: self.endpoint.complete(job[2], job[1]), jobs))
            for (r, _, _), out in zip(jobs, outs, strict=True):
                self.outcomes.append(out)
                result[r] = self._generation(r, out)
                self._turn[r] += 1
        return result

    def _error(self, error: str) -> Generation:
        return Generation(text="", token_ids=[], logprob=math.nan, tokens_in=0, tokens_out=0,
                          stop_reason="endpoint_error", error=error)

    def _generation(self, row: int, out: Outcome) -> Generation:
        if not out.ok:
            self._failed[row] = out.reason
            return self._error(f"{out.reason}: {out.error}" if out.error else str(out.reason))
        try:  # every field read from the reply, so a reply of the wrong shape is a failed step, not a crash
            choice = out.response["choices"][0]
            message = dict(choice["message"])
            calls = [dict(c) for c in message.get("tool_calls") or []]
            text, logprob = assistant_text(message), _logprob(choice)
            usage = out.response.get("usage") or {}
            tokens_in, tokens_out = _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
            self._failed[row] = "bad_response"
            return self._error(f"bad_response: the reply is not a chat completion of the expected shape "
                               f"({type(e).__name__}: {str(e)[:200]})")
        for i, c in enumerate(calls):  # a call id is needed to answer the call; some servers omit it
            c["id"] = c.get("id") or f"call_{self._turn[row]}_{i}"
        # Null content is allowed only beside tool calls (OpenAI answers 400 to it otherwise).
        content = message.get("content")
        wire_msg = {"role": "assistant", "content": content if (content is not None or calls) else ""}
        if calls:
            wire_msg["tool_calls"] = calls
        self._wire[row].append(wire_msg)
        return Generation(text=text, token_ids=[], logprob=logprob, tokens_in=tokens_in, tokens_out=tokens_out,
                          stop_reason=str(choice.get("finish_reason") or "unknown"))
