"""Tool schemas and the validation of a model's call against them.

`function_tool(...)` builds an OpenAI function-calling schema; `ToolSchemas(tools).check(call)`
validates a call with `jsonschema` and returns `(normalized call, None)` or `(None, message)`.
The message names the tool, the argument and what was expected, e.g.
``tool 'apply': argument 'amount' expected integer, got string '5'``. Nothing here raises on
anything a model can emit, and nothing evaluates or executes model output: arguments given as a
JSON string are parsed with `json.loads`, never `eval`.
"""

from __future__ import annotations

import difflib
import json
import math
from typing import Any

import jsonschema

from qdrift.envs.base import ToolCall

_JSON_TYPES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
    type(None): "null",
}


def function_tool(name: str, description: str, properties: dict[str, dict], required: list[str] | None = None) -> dict:
    """An OpenAI function schema whose parameters are an object with exactly `properties`."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties) if required is None else list(required),
                "additionalProperties": False,
            },
        },
    }


def _short(value: Any, limit: int = 40) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _kind(value: Any) -> str:
    for t, name in _JSON_TYPES.items():
        if type(value) is t:
            return name
    return type(value).__name__


def describe(schema: dict) -> str:
    """A terse description of what a property schema accepts: `integer in -999..999`, `one of red, blue`."""
    if "enum" in schema:
        return "one of " + ", ".join(str(v) for v in schema["enum"])
    text = str(schema.get("type", "any value"))
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if lo is not None and hi is not None:
        text += f" in {lo}..{hi}"
    elif lo is not None:
        text += f" >= {lo}"
    elif hi is not None:
        text += f" <= {hi}"
    if "maxLength" in schema:
        text += f" of at most {schema['maxLength']} characters"
    if "pattern" in schema:
        text += f" matching {schema['pattern']}"
    return text


class ToolSchemas:
    """Validators for a fixed list of OpenAI function schemas."""

    def __init__(self, tools: list[dict]):
        self.tools = tools
        self.params: dict[str, dict] = {}
        self.validators: dict[str, jsonschema.protocols.Validator] = {}
        for tool in tools:
            fn = tool.get("function", tool)
            params = fn.get("parameters", {"type": "object", "properties": {}})
            cls = jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator)
            cls.check_schema(params)
            self.params[fn["name"]] = params
            self.validators[fn["name"]] = cls(params)

    @property
    def names(self) -> list[str]:
        return list(self.params)

    def check(self, call: Any) -> tuple[ToolCall | None, str | None]:
        """Validate `call`; never raises. Returns (call with normalized arguments, None) or (None, message)."""
        try:
            return self._check(call)
        except Exception as exc:  # a last line of defence: model output must never crash an episode
            return None, f"could not validate call ({type(exc).__name__})"

    def _check(self, call: Any) -> tuple[ToolCall | None, str | None]:
        available = ", ".join(self.names)
        if call is None:
            return None, f"no tool call found; call one of: {available}"
        if isinstance(call, ToolCall):
            name, args = call.name, call.arguments
        elif isinstance(call, dict) and "name" in call:
            name, args = call.get("name"), call.get("arguments", {})
        else:
            return None, f"not a tool call ({_kind(call)}); call one of: {available}"
        if not isinstance(name, str):
            return None, f"tool name must be a string, got {_kind(name)} {_short(name)}"
        if name not in self.params:
            close = difflib.get_close_matches(name, self.names, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            return None, f"unknown tool {_short(name)}.{hint} Available: {available}"
        params = self.params[name]
        props: dict[str, dict] = params.get("properties", {})
        if args is None:
            args = {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None, f"tool '{name}': arguments are not valid JSON: {_short(args)}"
        if not isinstance(args, dict):
            return None, f"tool '{name}': arguments must be an object, got {_kind(args)}"
        for key in args:
            if not isinstance(key, str):
                return None, f"tool '{name}': argument names must be strings, got {_short(key)}"
        for key in params.get("required", []):
            if key not in args:
                return None, f"tool '{name}': missing argument '{key}' (expected {describe(props.get(key, {}))})"
        if params.get("additionalProperties", True) is False:
            for key in args:
                if key not in props:
                    expected = ", ".join(props) or "none"
                    return None, f"tool '{name}': unexpected argument '{key[:30]}' (expected arguments: {expected})"
        for key, value in args.items():
            if isinstance(value, float) and not math.isfinite(value):
                return None, f"tool '{name}': argument '{key}' expected {describe(props.get(key, {}))}, got {value}"
            if _has_huge_integer(value, props.get(key, {}).get("type") == "integer"):
                return None, (f"tool '{name}': argument '{key}' holds an integer outside the range JSON keeps "
                              f"exactly (at most 2^53 - 1 = {MAX_JSON_INT} in size, RFC 7493)")
        errors = sorted(self.validators[name].iter_errors(args), key=lambda e: [str(p) for p in e.path])
        if errors:
            err = errors[0]
            if err.path:
                key = str(err.path[0])
                value = args.get(key)
                return None, (f"tool '{name}': argument '{key}' expected {describe(props.get(key, {}))}, "
                              f"got {_kind(value)} {_short(value)}")
            return None, f"tool '{name}': {err.message[:120]}"
        normalized = {}
        for key, value in args.items():
            if props.get(key, {}).get("type") == "integer" and isinstance(value, float):
                value = int(value)
            normalized[key] = value
        return ToolCall(name, normalized), None


MAX_JSON_INT = 2**53 - 1


def _has_huge_integer(value: Any, integer_typed: bool) -> bool:
    """Whether `value` holds an integer (or, for an integer argument, an integral float) beyond
    MAX_JSON_INT. Such numbers are refused rather than executed: they are not interoperable JSON,
    and arithmetic on them can grow without bound (a 4,301-digit balance cannot even be printed)."""
    if integer_typed and isinstance(value, float) and value.is_integer():
        return abs(value) > MAX_JSON_INT
    stack = [value]
    while stack:  # iterative: model output can nest deeper than the recursion limit
        v = stack.pop()
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > MAX_JSON_INT:
            return True
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def call_text(call: ToolCall | None) -> str:
    """Compact JSON of a call, for records and messages: {"name":...,"arguments":{...}}."""
    if call is None:
        return "null"
    return json.dumps({"name": call.name, "arguments": call.arguments}, separators=(",", ":"), sort_keys=True)
