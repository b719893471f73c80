"""Validation of a call against OpenAI function schemas."""

from __future__ import annotations

import jsonschema
import pytest

from qdrift.envs.base import ToolCall
from qdrift.envs.schema import ToolSchemas, call_text, describe, function_tool

TOOLS = [
    function_tool("apply", "Apply.", {"amount": {"type": "integer", "minimum": -9, "maximum": 9}}),
    function_tool("move", "Move.", {"color": {"type": "string", "enum": ["red", "blue"]}}),
    function_tool("rename", "Rename.", {"src": {"type": "string"}, "dst": {"type": "string"}}),
]


@pytest.fixture
def schemas():
    return ToolSchemas(TOOLS)


def test_valid_calls_pass_and_are_normalized(schemas):
    assert schemas.check(ToolCall("apply", {"amount": 3})) == (ToolCall("apply", {"amount": 3}), None)
    call, err = schemas.check(ToolCall("apply", {"amount": 3.0}))
    assert err is None and call.arguments["amount"] == 3 and type(call.arguments["amount"]) is int
    assert schemas.check(ToolCall("move", '{"color": "red"}'))[0] == ToolCall("move", {"color": "red"})
    assert schemas.check({"name": "rename", "arguments": {"src": "a", "dst": "b"}})[1] is None


@pytest.mark.parametrize("call, words", [
    (None, ["no tool call", "apply", "move"]),
    ("apply(3)", ["not a tool call", "apply"]),
    (ToolCall("aply", {"amount": 1}), ["unknown tool", "Did you mean 'apply'?", "Available: apply, move, rename"]),
    (ToolCall(None, {}), ["tool name must be a string"]),
    (ToolCall("apply", {}), ["'apply'", "missing argument 'amount'", "expected integer in -9..9"]),
    (ToolCall("apply", {"amount": 1, "x": 2}), ["'apply'", "unexpected argument 'x'", "expected arguments: amount"]),
    (ToolCall("apply", {"amount": "3"}), ["'apply'", "argument 'amount' expected integer", "got string \"3\""]),
    (ToolCall("apply", {"amount": True}), ["argument 'amount' expected integer", "got boolean"]),
    (ToolCall("apply", {"amount": 10}), ["argument 'amount' expected integer in -9..9", "got integer 10"]),
    (ToolCall("apply", {"amount": 2.5}), ["argument 'amount' expected integer"]),
    (ToolCall("apply", {"amount": float("nan")}), ["argument 'amount' expected integer"]),
    (ToolCall("move", {"color": "green"}), ["'move'", "argument 'color' expected one of red, blue"]),
    (ToolCall("rename", {"src": "a", "dst": None}), ["'rename'", "argument 'dst' expected string", "got null"]),
    (ToolCall("apply", "{oops"), ["'apply'", "not valid JSON"]),
    (ToolCall("apply", [1]), ["'apply'", "must be an object"]),
    (ToolCall("apply", {1: 2}), ["argument names must be strings"]),
    (ToolCall("apply", {"amount": "__import__('os').system('x')"}), ["argument 'amount' expected integer"]),
    (ToolCall("exec(open('x').read())", {}), ["unknown tool"]),
    (ToolCall("apply", {"amount": object()}), ["argument 'amount' expected integer"]),
])
def test_invalid_calls_give_messages(schemas, call, words):
    out, err = schemas.check(call)
    assert out is None and isinstance(err, str) and len(err) < 200
    for w in words:
        assert w in err, (w, err)


def test_describe():
    assert describe({"type": "integer", "minimum": 0}) == "integer >= 0"
    assert describe({"type": "string", "maxLength": 4}) == "string of at most 4 characters"
    assert describe({}) == "any value"


def test_bad_schema_is_rejected_at_construction():
    with pytest.raises(jsonschema.SchemaError):
        ToolSchemas([{"type": "function", "function": {"name": "x", "parameters": {"type": 5}}}])


def test_call_text_is_compact_json():
    assert call_text(ToolCall("apply", {"amount": -3})) == '{"arguments":{"amount":-3},"name":"apply"}'
    assert call_text(None) == "null"


def test_integers_beyond_what_json_keeps_exactly_are_refused_not_executed():
    s = ToolSchemas([function_tool("add", "Add.", {"n": {"type": "integer"}, "xs": {"type": "array"}}, ["n"])])
    limit = 2**53 - 1
    assert s.check(ToolCall("add", {"n": limit, "xs": [-limit]}))[1] is None
    for args in ({"n": limit + 1}, {"n": -(10**4300)}, {"n": 1e308}, {"n": 1, "xs": [[{"a": 2**60}]]}):
        out, err = s.check(ToolCall("add", args))
        assert out is None and "outside the range JSON keeps exactly" in err and "RFC 7493" in err, args
    assert s.check(ToolCall("add", {"n": 1, "xs": [1e300]}))[1] is None  # a non-integer number is not an integer


@pytest.mark.parametrize("env_name, knobs, calls", [
    ("ledger", {}, [("apply", "amount")]),
    ("dict_sum", {"slack": 2}, [("report", "total"), ("report", "total")]),
])
def test_a_huge_number_from_the_model_is_a_scored_error_step(env_name, knobs, calls):
    from qdrift.envs.parsers import get_parser
    from qdrift.envs.registry import make_environment

    env = make_environment(env_name, horizon=3, seed=0, **knobs)
    env.reset()
    nines = "9" * 4300  # the longest integer Python's json accepts
    for tool, arg in calls:
        text = f'<tool_call>\n{{"name": "{tool}", "arguments": {{"{arg}": {nines}}}}}\n</tool_call>'
        (call,) = get_parser("hermes").parse(text).calls
        result = env.step(call, text)
        assert result.observation.startswith("error:") and not result.valid and not result.correct
    env.expected(), env.success()  # the state stays printable and checkable
