"""Tool-call parsers for the common model output formats.

A parser turns the raw text of one assistant turn into `ToolCall`s plus the text outside the call
markup, and renders a `ToolCall` as the exact string a model of that family emits (the string its
chat template writes for an assistant tool call), which is what training data and prefilled call
openings are built from.

Formats (`get_parser(name)`):

* ``hermes`` -- Hermes / Qwen2.5 / Qwen3: one or more
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` blocks.
* ``llama3_json`` -- Llama-3.1 / 3.2 / 3.3 JSON tool calling: ``{"name": ..., "parameters": {...}}``,
  optionally after ``<|python_tag|>``; ``"arguments"`` is accepted in place of ``"parameters"``, and
  several objects separated by ``;`` (or a JSON list of objects) are accepted.
* ``mistral`` -- Mistral-7B-Instruct-v0.3 / Mixtral / Mistral-Nemo:
  ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``, and the newer (tokenizer v11+,
  Mistral-Small-3.2, Magistral, Devstral) ``[TOOL_CALLS]name[ARGS]{...}`` form (optionally with
  ``[CALL_ID]id`` before ``[ARGS]``), several calls each opened by ``[TOOL_CALLS]``.
* ``pythonic`` -- Llama-3.2 / Llama-4 "pythonic" tool calling (vLLM's ``pythonic`` parser):
  ``[lookup(key="k17")]``, a Python list of calls with keyword arguments whose values are Python
  literals. The most compact of the four (a pointer-chasing call with a three-digit key is 10
  SmolLM2 tokens against 31 in Hermes form), which is what makes long episodes affordable on small
  hardware.

Parsing never raises on model output and never evaluates it: JSON is decoded with the `json`
module only. What a parser accepts, and how it is recorded in `ParsedTurn`:

* ``error`` is None when every call region parsed into a call; otherwise it says what was wrong
  with the first bad region (the good regions' calls are still returned).
* ``json_valid`` is True when every call region was valid JSON with a string ``"name"`` and an
  object ``"arguments"`` (vacuously True when there is no call region). Two lenient cases are
  *accepted* (a call is returned, ``error`` stays None) but recorded with ``json_valid=False``:
  arguments given as a JSON string that decodes to an object (decoded once, as vLLM does for
  Hermes), and missing / null arguments (taken as ``{}``). Arguments under another key (Hermes
  ``"parameters"``) are an error, not missing: they would be dropped.
* ``leading_error`` is True when the first call region failed: ``calls[0]`` then comes from a later
  region, and the episode runner scores the turn as having no valid call.
* Hermes: a leading ``<think>...</think>`` block is content, so a ``<tool_call>`` it mentions is
  not a call; a ``<tool_call>`` opened again before it is closed is an unterminated region.
* An unterminated final ``<tool_call>`` whose JSON is complete is accepted without error, because a
  generation stopped on the ``</tool_call>`` stop string may come back without it; if its JSON is
  incomplete (truncated output) the region is an error.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from qdrift.envs.base import ToolCall

__all__ = [
    "ParsedTurn",
    "ToolCallParser",
    "HermesParser",
    "Llama3JsonParser",
    "MistralParser",
    "PythonicParser",
    "PARSERS",
    "get_parser",
    "parser_for",
]


@dataclass(frozen=True)
class ParsedTurn:
    calls: list[ToolCall]  # parsed calls (may be empty)
    content: str  # text outside the call markup (stripped)
    error: str | None  # None if every call region parsed; else what was wrong
    json_valid: bool  # every call region was valid JSON, string "name", object "arguments"
    # The first call region failed, so calls[0] (if any) comes from a later region: an agent whose
    # environment answers one call per turn made a malformed call, whatever follows it.
    leading_error: bool = False


@runtime_checkable
class ToolCallParser(Protocol):
    name: str
    opening: str  # the text that opens a call; render(call) starts with it
    stop_strings: tuple[str, ...]  # strings after which generation of a call turn can stop

    def parse(self, text: str) -> ParsedTurn: ...

    def render(self, call: ToolCall) -> str: ...


def _dumps(obj: Any) -> str:
    # What transformers' chat-template `tojson` writes: json.dumps, ensure_ascii=False, no sorting.
    return json.dumps(obj, ensure_ascii=False)


def _json_error(where: str, exc: Exception) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"invalid JSON in {where}: {exc.msg} at char {exc.pos}"
    return f"invalid JSON in {where}: {type(exc).__name__}: {exc}"


class _Region:
    """One call region's outcome: a call (or None) and whether it was strictly valid."""

    __slots__ = ("call", "error", "strict")

    def __init__(self, call: ToolCall | None, error: str | None, strict: bool):
        self.call, self.error, self.strict = call, error, strict


def _call_from_obj(obj: Any, where: str, arg_keys: tuple[str, ...] = ("arguments",)) -> _Region:
    """Validate a decoded JSON value as {"name": str, <arg_key>: object}."""
    if not isinstance(obj, dict):
        return _Region(None, f"{where} is a JSON {type(obj).__name__}, not an object", False)
    name = obj.get("name")
    if name is None:
        return _Region(None, f"{where} has no \"name\"", False)
    if not isinstance(name, str) or not name.strip():
        return _Region(None, f"{where} has a \"name\" that is not a non-empty string: {name!r}", False)
    key = next((k for k in arg_keys if k in obj), None)
    if key is None:
        others = [k for k in obj if k not in ("name", "id", "type")]
        if others:  # arguments given under another key are not "no arguments": they would be dropped
            keys = ", ".join(json.dumps(k) for k in others[:3])
            want = " or ".join(f'"{k}"' for k in arg_keys)
            return _Region(None, f"{where} has no {want} (its other keys: {keys})", False)
    args = obj.get(key) if key is not None else None
    return _args_region(name, args, where, key or arg_keys[0])


def _args_region(name: str, args: Any, where: str, key: str = "arguments") -> _Region:
    if args is None:
        return _Region(ToolCall(name, {}), None, False)  # missing / null: lenient, {}
    if isinstance(args, dict):
        return _Region(ToolCall(name, args), None, True)
    if isinstance(args, str):  # a JSON string containing an object: decode once
        try:
            decoded = _DECODER.decode(args)
        except Exception as exc:  # noqa: BLE001 - never raise on model output
            return _Region(None, f"{where}: \"{key}\" is a string that is not JSON ({_json_error('it', exc)})", False)
        if isinstance(decoded, dict):
            return _Region(ToolCall(name, decoded), None, False)
        return _Region(None, f"{where}: \"{key}\" is a string holding a JSON {type(decoded).__name__}, not an object", False)
    return _Region(None, f"{where}: \"{key}\" is a JSON {type(args).__name__}, not an object", False)


def _turn(regions: list[_Region], content_parts: list[str]) -> ParsedTurn:
    calls = [r.call for r in regions if r.call is not None]
    error = next((r.error for r in regions if r.error is not None), None)
    content = "\n".join(p.strip() for p in content_parts if p.strip())
    return ParsedTurn(calls=calls, content=content, error=error, json_valid=all(r.strict for r in regions),
                      leading_error=bool(regions) and regions[0].call is None)


def _safe(parse):
    """Parsing must never raise: anything unexpected becomes an error in the ParsedTurn."""

    def wrapper(self, text):
        if not isinstance(text, str):
            return ParsedTurn([], "", f"expected model output as str, got {type(text).__name__}", False, True)
        try:
            return parse(self, text)
        except Exception as exc:  # noqa: BLE001
            return ParsedTurn([], text.strip(), f"{self.name} parser failed: {type(exc).__name__}: {exc}", False, True)

    wrapper.__doc__ = parse.__doc__
    wrapper.__name__ = parse.__name__
    return wrapper


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON (RFC 8259 has no NaN or Infinity)")


# Python's decoder takes NaN / Infinity / -Infinity; a call holding one is not strict JSON, so it
# is a parse error here like any other invalid JSON.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _raw_decode(text: str, pos: int):
    """json.raw_decode at `pos` (after whitespace): (value, end) or raises."""
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return _DECODER.raw_decode(text, pos)


# ----------------------------------------------------------------------------------------- hermes


class HermesParser:
    """Hermes / Qwen format: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``."""

    name = "hermes"
    opening = "<tool_call>\n"
    stop_strings = ("</tool_call>",)
    _OPEN, _CLOSE = "<tool_call>", "</tool_call>"
    call_marker = _OPEN  # where call markup starts: the text before it is the turn's content
    _THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"

    def render(self, call: ToolCall) -> str:
        # Exactly what the Qwen2.5 template writes after "<|im_start|>assistant\n" for one call.
        return f'<tool_call>\n{{"name": {_dumps(call.name)}, "arguments": {_dumps(call.arguments)}}}\n</tool_call>'

    @_safe
    def parse(self, text: str) -> ParsedTurn:
        regions: list[_Region] = []
        content: list[str] = []
        pos = 0
        # A leading <think>...</think> block (Qwen3) is content: a "<tool_call>" it mentions is not a call.
        if text.lstrip().startswith(self._THINK_OPEN) and self._THINK_CLOSE in text:
            pos = text.index(self._THINK_CLOSE) + len(self._THINK_CLOSE)
            content.append(text[:pos])
        while True:
            start = text.find(self._OPEN, pos)
            if start < 0:
                content.append(text[pos:])
                break
            content.append(text[pos:start])
            body_start = start + len(self._OPEN)
            # JSON first, so a "</tool_call>" inside a JSON string does not end the region
            try:
                obj, jend = _raw_decode(text, body_start)
            except Exception:  # noqa: BLE001 - fall back to the closing tag
                jend = -1
            if jend >= 0:
                k = jend
                while k < len(text) and text[k] in " \t\r\n":
                    k += 1
                # The output may end after the JSON, or inside the closing tag (cut by max_new_tokens
                # where the tag is several tokens): an unterminated call, accepted as at the very end.
                cut = self._CLOSE.startswith(text[k:])
                if text.startswith(self._CLOSE, k) or cut:
                    regions.append(_call_from_obj(obj, "<tool_call>"))
                    if cut:
                        content.append("")
                        break
                    pos = k + len(self._CLOSE)
                    continue
            end = text.find(self._CLOSE, body_start)
            again = text.find(self._OPEN, body_start)
            if 0 <= again and (end < 0 or again < end):  # opened again before closing: this one never closed
                regions.append(self._region(text[body_start:again], terminated=False))
                pos = again
                continue
            if end < 0:
                regions.append(self._region(text[body_start:], terminated=False))
                break
            regions.append(self._region(text[body_start:end], terminated=True))
            pos = end + len(self._CLOSE)
        # a stray </tool_call> outside any region is just text; leave it in content
        return _turn(regions, content)

    def _region(self, body: str, terminated: bool) -> _Region:
        where = "<tool_call>"
        stripped = body.strip()
        if not stripped:
            return _Region(None, "empty <tool_call>" if terminated else "unterminated empty <tool_call>", False)
        if not terminated and self._OPEN in stripped:
            stripped = stripped.split(self._OPEN, 1)[0].strip()
        try:
            obj, end = _raw_decode(stripped, 0)
        except Exception as exc:  # noqa: BLE001
            msg = _json_error(where, exc)
            return _Region(None, msg if terminated else f"unterminated <tool_call> ({msg})", False)
        if stripped[end:].strip():
            return _Region(None, f"invalid JSON in {where}: extra data at char {end}", False)
        return _call_from_obj(obj, where)


# ------------------------------------------------------------------------------------ llama3_json


class Llama3JsonParser:
    """Llama-3.x JSON tool calling: ``{"name": ..., "parameters": {...}}``, optionally after
    ``<|python_tag|>``.

    A call region starts at ``<|python_tag|>`` if present; else a turn that opens with ``{`` (or
    ``[{``) is one, whatever the object's key order; else it starts at the first ``{"name"`` or
    ``{"type"`` (``{"type": "function", "name": ...}``; or the same after ``[``), and text before
    it is content. Several objects may follow each other, separated by
    ``;``, ``,`` or whitespace, or be given as one JSON list; text after the last object is content.
    Text with no call region is a plain (final) answer; a turn that starts with ``{`` but has no
    ``"name"`` counts as a bad call region (as in vLLM's llama3_json parser). Llama-3.2's "pythonic"
    ``[f(x=1)]`` form is `PythonicParser`'s.
    """

    name = "llama3_json"
    opening = '{"name": "'
    stop_strings = ("<|eom_id|>", "<|eot_id|>")
    _TAG = "<|python_tag|>"
    # A call object opens with "name" or "type" ({"type": "function", "name": ...}, as Llama-3.x often
    # writes); an object or list at the very start of the turn (or after the tag) is a call region
    # whatever its first key.
    _START = re.compile(r'\[?\s*\{\s*"(?:name|type)"\s*:')
    _LEADING = re.compile(r'\s*(?:\{|\[\s*\{)')
    _ARG_KEYS = ("parameters", "arguments")

    def render(self, call: ToolCall) -> str:
        # What the Llama-3.1/3.2 templates write for an assistant tool call (before <|eot_id|>).
        return f'{{"name": {_dumps(call.name)}, "parameters": {_dumps(call.arguments)}}}'

    @_safe
    def parse(self, text: str) -> ParsedTurn:
        tag = text.find(self._TAG)
        if tag >= 0:
            before, start = text[:tag], tag + len(self._TAG)
            rest = text[start:]
            trailing_tag_text = rest
            if self._LEADING.match(rest):
                return self._parse_from(text, start + len(rest) - len(rest.lstrip()), [before])
            m = self._START.search(rest)
            if m is None or rest[: m.start()].strip():
                # <|python_tag|> followed by something that is not a JSON call (e.g. a builtin
                # tool's Python code): a call region that does not parse
                try:
                    _raw_decode(rest, 0)
                    err = "tool call after <|python_tag|> has no \"name\""
                except Exception as exc:  # noqa: BLE001
                    err = _json_error("tool call after <|python_tag|>", exc)
                if not trailing_tag_text.strip():
                    err = "empty tool call after <|python_tag|>"
                return _turn([_Region(None, err, False)], [before])
            return self._parse_from(text, start + m.start(), [before])
        if self._LEADING.match(text):  # the turn opens with JSON: a call region (a bad one without "name")
            return self._parse_from(text, len(text) - len(text.lstrip()), [])
        m = self._START.search(text)
        if m is None:
            return _turn([], [text])
        return self._parse_from(text, m.start(), [text[: m.start()]])

    def _parse_from(self, text: str, pos: int, content: list[str]) -> ParsedTurn:
        where = "tool call"
        regions: list[_Region] = []
        while True:
            try:
                obj, end = _raw_decode(text, pos)
            except Exception as exc:  # noqa: BLE001
                regions.append(_Region(None, _json_error(where, exc), False))
                return _turn(regions, content)
            items = obj if isinstance(obj, list) else [obj]
            if not items:
                regions.append(_Region(None, "empty list of tool calls", False))
            regions.extend(_call_from_obj(o, where, self._ARG_KEYS) for o in items)
            pos = end
            # another call? separators: whitespace, ';', ','
            j = pos
            while j < len(text) and text[j] in " \t\r\n;,":
                j += 1
            if self._START.match(text, j):
                pos = j
                continue
            content.append(text[pos:])
            return _turn(regions, content)


# ---------------------------------------------------------------------------------------- mistral


class MistralParser:
    """Mistral ``[TOOL_CALLS]`` formats.

    Parses both ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`` (v0.3 templates; an
    ``"id"`` key is ignored) and ``[TOOL_CALLS]name[ARGS]{...}`` (tokenizer v11+, optionally
    ``[TOOL_CALLS]name[CALL_ID]id[ARGS]{...}``). `style` selects what `render` writes: ``"list"``
    (default; what Mistral-7B-Instruct-v0.3's template writes, minus the ``"id"``) or ``"args"``.
    """

    name = "mistral"
    stop_strings = ("</s>",)
    _TAG = "[TOOL_CALLS]"
    call_marker = _TAG  # where call markup starts: the text before it is the turn's content

    def __init__(self, style: str = "list"):
        if style not in ("list", "args"):
            raise ValueError(f"Unknown mistral style {style!r}; use 'list' or 'args'")
        self.style = style
        self.opening = "[TOOL_CALLS] [" if style == "list" else "[TOOL_CALLS]"

    def render(self, call: ToolCall) -> str:
        if self.style == "args":
            return f"[TOOL_CALLS]{call.name}[ARGS]{_dumps(call.arguments)}"
        return f'[TOOL_CALLS] [{{"name": {_dumps(call.name)}, "arguments": {_dumps(call.arguments)}}}]'

    @_safe
    def parse(self, text: str) -> ParsedTurn:
        regions: list[_Region] = []
        content: list[str] = []
        pos = 0
        while True:
            start = text.find(self._TAG, pos)
            if start < 0:
                content.append(text[pos:])
                break
            content.append(text[pos:start])
            body = start + len(self._TAG)
            j = body
            while j < len(text) and text[j] in " \t\r\n":
                j += 1
            if j < len(text) and text[j] in "[{" and not text.startswith(("[ARGS]", "[CALL_ID]"), j):
                pos = self._parse_list(text, j, regions)
            else:
                pos = self._parse_args(text, j, regions)
            if pos < 0:
                break
        return _turn(regions, content)

    def _parse_list(self, text: str, j: int, regions: list[_Region]) -> int:
        where = "[TOOL_CALLS]"
        try:
            obj, end = _DECODER.raw_decode(text, j)
        except Exception as exc:  # noqa: BLE001
            regions.append(_Region(None, _json_error(where, exc), False))
            return -1
        items = obj if isinstance(obj, list) else [obj]
        if not items:
            regions.append(_Region(None, "empty list after [TOOL_CALLS]", False))
        regions.extend(_call_from_obj(o, where) for o in items)
        if text.startswith("</s>", end):
            end += len("</s>")
        return end

    def _parse_args(self, text: str, j: int, regions: list[_Region]) -> int:
        args_at = text.find("[ARGS]", j)
        next_tag = text.find(self._TAG, j)
        if args_at < 0 or (0 <= next_tag < args_at):
            regions.append(_Region(None, "[TOOL_CALLS] without a JSON list or a name[ARGS]{...} call", False))
            return next_tag if next_tag >= 0 else -1
        name = text[j:args_at]
        if "[CALL_ID]" in name:
            name = name.split("[CALL_ID]", 1)[0]
        name = name.strip()
        where = f"[ARGS] of {name!r}" if name else "[ARGS]"
        if not name:
            regions.append(_Region(None, "[TOOL_CALLS] call has no name before [ARGS]", False))
        try:
            args, end = _raw_decode(text, args_at + len("[ARGS]"))
        except Exception as exc:  # noqa: BLE001
            regions.append(_Region(None, _json_error(where, exc), False))
            return -1
        if name:
            regions.append(_args_region(name, args, where))
        if text.startswith("</s>", end):
            end += len("</s>")
        return end


# --------------------------------------------------------------------------------------- pythonic


def _py_literal(value: Any) -> str:
    """A JSON-like value as Python literal source, strings double-quoted (json.dumps escapes are valid
    Python escapes), so a rendered call parses back to the same value."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} has no literal form in a call")
        return repr(value)
    if isinstance(value, str):
        return _dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_dumps(str(k))}: {_py_literal(v)}" for k, v in value.items()) + "}"
    raise ValueError(f"a {type(value).__name__} has no literal form in a call")


class PythonicParser:
    """Pythonic tool calling: ``[name(arg=value, ...), ...]``.

    The call region starts at a ``[`` that opens a line (the turn's start or after a newline) and
    runs to the end of the turn; the text before it is content (e.g. a worked line). The region is
    parsed with Python's `ast` (never evaluated): it must be a list of calls to plain names with
    keyword arguments only, each value a literal (`ast.literal_eval`). Anything else is a parse
    error, recorded with ``json_valid=False`` (for this format the column means "the call region is
    well-formed"). A turn with no such ``[`` holds no call.
    """

    name = "pythonic"
    opening = "["
    # No stop string: a call list ends with ")]", which an argument may also contain; the turn ends
    # at the end-of-turn token the model writes after it.
    stop_strings: tuple[str, ...] = ()
    # What the prompted-tools system message says about writing a call (the JSON formats' wording
    # would be wrong here).
    call_instruction = "Use the tool's name and give each argument as name=value, the value a literal."
    _START = re.compile(r"(?:^|\n)[ \t]*\[")

    def render(self, call: ToolCall) -> str:
        args = ", ".join(f"{k}={_py_literal(v)}" for k, v in call.arguments.items())
        return f"[{call.name}({args})]"

    @_safe
    def parse(self, text: str) -> ParsedTurn:
        m = self._START.search(text)
        if m is None:
            return _turn([], [text])
        start = m.end() - 1
        body = text[start:].strip()
        return _turn(self._regions(body), [text[:start]])

    @staticmethod
    def _regions(body: str) -> list[_Region]:
        import ast

        where = "pythonic call list"
        try:
            tree = ast.parse(body, mode="eval").body
        except SyntaxError as exc:
            return [_Region(None, f"invalid {where}: {exc.msg} at char {max((exc.offset or 1) - 1, 0)}", False)]
        if not isinstance(tree, ast.List):
            return [_Region(None, f"{where} is a Python {type(tree).__name__}, not a list of calls", False)]
        if not tree.elts:
            return [_Region(None, f"empty {where}", False)]
        regions = []
        for node in tree.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                regions.append(_Region(None, f"{where}: an item is not a call to a tool name", False))
                continue
            name = node.func.id
            if node.args or any(k.arg is None for k in node.keywords):
                regions.append(_Region(None, f"{where}: {name}() takes keyword arguments only", False))
                continue
            args, bad = {}, None
            for k in node.keywords:
                try:
                    args[k.arg] = ast.literal_eval(k.value)
                except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                    bad = k.arg
                    break
            if bad is not None:
                regions.append(_Region(None, f"{where}: argument {bad!r} of {name}() is not a literal", False))
                continue
            if any(isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))) for v in args.values()):
                regions.append(_Region(None, f"{where}: an argument of {name}() is not finite", False))
                continue
            regions.append(_Region(ToolCall(name, args), None, True))
        return regions


# --------------------------------------------------------------------------------------- registry

PARSERS = {"hermes": HermesParser, "llama3_json": Llama3JsonParser, "mistral": MistralParser,
           "pythonic": PythonicParser}


def get_parser(name: str) -> ToolCallParser:
    """The parser for a format name: "hermes", "llama3_json", "mistral" or "pythonic"."""
    key = str(name).strip().lower()
    if key in PARSERS:
        return PARSERS[key]()
    close = difflib.get_close_matches(key, list(PARSERS), n=1, cutoff=0.4)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"Unknown tool-call format {name!r}.{hint} Available: {', '.join(PARSERS)}")


def _template_text(tokenizer) -> str:
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        return "\n".join(str(v) for v in tpl.values())
    if isinstance(tpl, (list, tuple)):  # [{"name":..., "template":...}]
        return "\n".join(str(t.get("template", "")) if isinstance(t, dict) else str(t) for t in tpl)
    return tpl or ""


def _parser_for_template(template: str) -> ToolCallParser | None:
    if "<tool_call>" in template:
        return HermesParser()
    if "<|python_tag|>" in template or "ipython" in template:
        return Llama3JsonParser()
    if "[TOOL_CALLS]" in template:
        return MistralParser(style="args" if "[ARGS]" in template else "list")
    return None


_NAME_HINTS = (
    (re.compile(r"qwen|hermes", re.I), "hermes"),
    (re.compile(r"llama[-_ ]?3", re.I), "llama3_json"),
    (re.compile(r"mistral|mixtral|ministral|magistral|devstral", re.I), "mistral"),
)


def parser_for(tokenizer_or_name) -> ToolCallParser:
    """Choose the parser for a tokenizer (by its chat template) or a name.

    A tokenizer is matched on its chat template: ``<tool_call>`` -> hermes; ``<|python_tag|>`` or
    ``ipython`` -> llama3_json; ``[TOOL_CALLS]`` -> mistral (``"args"`` render style when the
    template writes ``[ARGS]``). A string is a format name, or else a model id matched on its name
    (qwen/hermes -> hermes, llama-3 -> llama3_json, mistral/mixtral/... -> mistral). Anything else
    raises ValueError: pass ``parser=`` explicitly.
    """
    if isinstance(tokenizer_or_name, str):
        if tokenizer_or_name.strip().lower() in PARSERS:
            return get_parser(tokenizer_or_name)
        for pattern, fmt in _NAME_HINTS:
            if pattern.search(tokenizer_or_name):
                return get_parser(fmt)
        raise ValueError(
            f"Cannot tell the tool-call format of {tokenizer_or_name!r} from its name; "
            f"pass parser= explicitly (one of: {', '.join(PARSERS)})"
        )
    model = getattr(tokenizer_or_name, "name_or_path", "") or type(tokenizer_or_name).__name__
    parser = _parser_for_template(_template_text(tokenizer_or_name))
    if parser is None:
        raise ValueError(
            f"Cannot tell the tool-call format of {model!r}: its chat template has no <tool_call>, "
            f"<|python_tag|>/ipython or [TOOL_CALLS] markup; pass parser= explicitly "
            f"(one of: {', '.join(PARSERS)})"
        )
    return parser
