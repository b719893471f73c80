"""Scoring chat-completion responses the way the public K2 Vendor Verifier does, per request.

A response "triggers" a tool call when its `finish_reason` is `"tool_calls"` (the verifier's
definition; a response with `tool_calls` but another finish reason does not count, and
`has_tool_calls` records it). A triggered response is schema-valid when it holds at least one call
and every call names one of the request's tools and has arguments that parse as JSON and validate
against that tool's `parameters` with jsonschema. From these per-request scores come the verifier's
counts (finish reasons, `count_finish_reason_tool_calls`, `count_successful_tool_call`,
`schema_accuracy`) and, against a reference run, trigger precision, recall and F1.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from qdrift.backends.endpoint import Outcome
from qdrift.verify.requests import VerifyRequest


@dataclass(frozen=True)
class ResponseScore:
    """What one response did: its finish reason, whether it called tools and whether the calls validate."""

    id: str
    ok: bool  # a response came back
    failure: str | None  # why not, when not ok
    finish_reason: str | None
    triggered: bool  # finish_reason == "tool_calls"
    has_tool_calls: bool
    calls: tuple[tuple[str, str], ...]  # (name, canonical JSON arguments or the raw text when not JSON)
    calls_valid: bool | None  # None unless triggered
    error: str | None  # the first reason a call did not validate
    oracle_match: bool | None  # the response is the expected call (or no call when none is expected); None without metadata

    @property
    def valid(self) -> bool:
        """Not a malformed tool call: either no trigger, or a trigger whose calls all validate."""
        return (not self.triggered) or bool(self.calls_valid)

    @property
    def action(self) -> tuple:
        """What the response did, for exact agreement between runs: trigger and the calls made."""
        return (self.triggered, self.calls if self.triggered else ())


def _validators(tools: list[dict]) -> dict[str, Any]:
    out = {}
    for t in tools:
        fn = t["function"]
        params = fn.get("parameters", {"type": "object"})
        out[fn["name"]] = jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator)(params)
    return out


def _check_call(call: Any, validators: Mapping[str, Any]) -> tuple[tuple[str, str], str | None]:
    """(canonical call, None) when the call validates, else (what it was, why not). Never raises."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return ("", json.dumps(call, default=str)[:200]), "tool call without a 'function' object"
    name, args = fn.get("name"), fn.get("arguments")
    if not isinstance(name, str):
        return ("", json.dumps(fn, default=str)[:200]), f"tool name is {name!r}, not a string"
    if isinstance(args, str):
        try:
            parsed = json.loads(args)
        except ValueError:
            return (name, args), f"tool '{name}': arguments are not valid JSON"
    else:
        parsed = args
    try:
        canon = json.dumps(parsed, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return (name, str(parsed)[:200]), f"tool '{name}': arguments are not JSON-serialisable"
    if name not in validators:
        return (name, canon), f"unknown tool '{name}'; the request's tools: {', '.join(validators)}"
    errors = list(validators[name].iter_errors(parsed))
    if errors:
        return (name, canon), f"tool '{name}': {errors[0].message[:160]}"
    return (name, canon), None


def score_response(request: VerifyRequest, outcome: Outcome | None) -> ResponseScore:
    """Score one outcome against its request's tools (and its expected call, when the file has one)."""
    if outcome is None or not outcome.ok or not isinstance(outcome.response, dict):
        reason = "not sent" if outcome is None else (outcome.reason or "no response body")
        return ResponseScore(request.id, False, reason, None, False, False, (), None, None, None)
    choices = outcome.response.get("choices") or []
    if not choices or not isinstance(choices[0], dict):
        return ResponseScore(request.id, False, "response has no choices", None, False, False, (), None, None, None)
    choice = choices[0]
    finish = choice.get("finish_reason")
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        return ResponseScore(request.id, False, f"response message is a JSON {type(message).__name__}, not an object",
                             None, False, False, (), None, None, None)
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raw_calls = [raw_calls]
    validators = _validators(request.tools)
    checked = [_check_call(c, validators) for c in raw_calls]
    calls = tuple(c for c, _ in checked)
    errors = [e for _, e in checked if e]
    triggered = finish == "tool_calls"
    calls_valid = None
    error = None
    if triggered:
        calls_valid = bool(calls) and not errors
        error = errors[0] if errors else (None if calls else "finish_reason is tool_calls but no tool_calls given")
    oracle = None
    if "expected" in request.meta:
        want = request.meta["expected"]
        if want is None:
            oracle = not triggered and not raw_calls
        else:
            canon = json.dumps(want["arguments"], sort_keys=True, separators=(",", ":"))
            oracle = triggered and calls == ((want["name"], canon),) and not errors
    return ResponseScore(request.id, True, None, finish, triggered, bool(raw_calls), calls, calls_valid, error,
                         oracle)


def score_run(requests: list[VerifyRequest], outcomes: Mapping[str, Outcome]) -> list[ResponseScore]:
    """One score per request, in request order (a request with no outcome is scored as not sent)."""
    return [score_response(r, outcomes.get(r.id)) for r in requests]


def run_summary(scores: list[ResponseScore]) -> dict[str, Any]:
    """The public verifier's counts for one run, plus qdrift's oracle accuracy when the file has it."""
    finish = Counter(s.finish_reason for s in scores if s.ok)
    others = {k: v for k, v in finish.items() if k not in ("stop", "tool_calls")}
    triggered = sum(s.triggered for s in scores)
    successful = sum(bool(s.calls_valid) for s in scores if s.triggered)
    oracle = [s.oracle_match for s in scores if s.ok and s.oracle_match is not None]
    return {
        "requests": len(scores),
        "success_count": sum(s.ok for s in scores),
        "failure_count": sum(not s.ok for s in scores),
        "failure_reasons": dict(Counter(s.failure for s in scores if not s.ok)),
        "finish_stop": finish.get("stop", 0),
        "finish_tool_calls": finish.get("tool_calls", 0),
        "finish_others": sum(others.values()),
        "finish_others_detail": {str(k): v for k, v in others.items()},
        "count_finish_reason_tool_calls": triggered,
        "count_successful_tool_call": successful,
        "schema_validation_error_count": triggered - successful,
        "schema_accuracy": successful / triggered if triggered else math.nan,
        "tool_calls_without_finish_reason": sum(s.has_tool_calls and not s.triggered for s in scores if s.ok),
        "oracle_accuracy": sum(oracle) / len(oracle) if oracle else None,
        "oracle_items": len(oracle),
    }


@dataclass(frozen=True)
class TriggerCounts:
    tp: int
    fp: int
    fn: int
    tn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else math.nan

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else math.nan

    @property
    def f1(self) -> float:
        """2PR / (P + R) = 2TP / (2TP + FP + FN); nan when neither side ever triggers."""
        d = 2 * self.tp + self.fp + self.fn
        return 2 * self.tp / d if d else math.nan


def trigger_counts(model: list[ResponseScore], reference: list[ResponseScore]) -> TriggerCounts:
    """TP/FP/FN/TN of 'called a tool' against the reference, on the requests both answered."""
    if [s.id for s in model] != [s.id for s in reference]:
        raise ValueError("model and reference scores must cover the same requests in the same order")
    pairs = [(m.triggered, r.triggered) for m, r in zip(model, reference, strict=True) if m.ok and r.ok]
    return TriggerCounts(
        tp=sum(m and r for m, r in pairs), fp=sum(m and not r for m, r in pairs),
        fn=sum(r and not m for m, r in pairs), tn=sum(not m and not r for m, r in pairs))
