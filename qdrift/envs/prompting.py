"""Driving models with and without native tool calling.

Two modes (`ToolPrompt.mode`):

* ``"native"`` -- the tokenizer's chat template renders ``tools=`` and the assistant
  ``tool_calls`` / ``tool`` messages itself (Qwen2.5, Llama-3.1, Mistral-v0.3, ...).
* ``"prompted"`` -- for templates without tool support (e.g. SmolLM2's ChatML): qdrift writes the
  tool list (JSON schemas) and the exact call format (`parser.render` of an example call) into the
  system message and renders the template without ``tools=``.

Messages follow the OpenAI shape::

    {"role": "assistant", "content": RAW, "tool_calls": [{"type": "function", "id": ...,
        "function": {"name": ..., "arguments": {...}}}]}
    {"role": "tool", "content": ..., "name": ..., "tool_call_id": ...}

**The runner stores the raw generated text in an assistant message's "content"**: the text decoded
with special tokens kept (``[TOOL_CALLS]``, ``<|python_tag|>`` are part of the call), minus the
final end-of-turn / EOS token, and *including* ``parser.opening`` when the opening was prefilled
(so ``content`` parses on its own and is exactly what follows the generation prompt in the KV
cache). `assistant_message` builds such a message. How history is rendered:

* prompted mode: an assistant message is rendered as its raw ``content`` (``tool_calls`` dropped);
  each run of consecutive ``tool`` messages becomes ONE ``user`` message holding every result as
  ``<tool_response>\\n...\\n</tool_response>`` (ChatML-style templates have no ``tool`` role, or
  render one the model never saw; ``user`` keeps user/assistant alternation for strict templates).
  If the template rejects a ``system`` message (Gemma-style), the system text is prepended to the
  first user message instead.
* native mode: messages go to the template as they are, except that an assistant message with
  ``tool_calls`` gets as ``content`` only the text outside the call markup (``parser.parse(raw)``
  .content): native templates write the calls themselves from ``tool_calls``, and passing the raw
  markup too would show every call twice. String ``arguments`` holding a JSON object are decoded.

Prefix property (what `suffix` relies on; checked in tests/envs/test_prompting.py). With
``A = render(before, add_generation_prompt=True)`` minus any prefilled opening, and ``after =
before + [assistant(raw)] + [tool results...]``:

1. ``render(before, add_generation_prompt=False)`` is a prefix of ``render(after)`` -- holds for
   ChatML and Qwen2.5-style templates (each message renders independently of later ones).
2. ``render(before, add_generation_prompt=True)`` is a prefix of ``render(after)`` -- holds there
   too, because the generation prompt (``<|im_start|>assistant\\n``) is how the next assistant
   message starts.
3. ``A + raw`` is a prefix of ``render(after)`` -- the property KV-cache reuse needs. It always
   holds in prompted mode (raw content is rendered verbatim). In native mode it holds only when
   the model's raw text is exactly what the template writes back from ``tool_calls``: the
   canonical ``parser.render(call)`` form (for Hermes: outside text, then one ``\\n``, then
   calls joined by ``\\n``, nothing after). Any other spacing, key order or trailing text breaks it
   and `suffix` raises ValueError; re-encode ``render(after)`` from scratch then.

`suffix` returns ``render(after)[len(A + raw):]``: it starts with the template's end-of-turn
marker (e.g. ``<|im_end|>\\n``); a backend that keeps the generated EOS token in its cache passes
its text as ``consumed=`` and gets the rest.
Tokenizing the suffix separately matches tokenizing the whole string when the split falls at a
special token (``<|im_end|>``), which it does for ChatML-family templates.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from qdrift.envs.base import ToolCall
from qdrift.envs.parsers import ParsedTurn, ToolCallParser, get_parser, parser_for

__all__ = [
    "ToolPrompt",
    "supports_native_tools",
    "tool_prompt_for",
    "assistant_message",
    "tool_message",
    "tools_system_prompt",
]


def _model_name(tokenizer) -> str:
    return getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__


def _template(tokenizer) -> str | None:
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, dict):
        tpl = tpl.get("tool_use") or tpl.get("default") or next(iter(tpl.values()), None)
    return tpl or None


def supports_native_tools(tokenizer) -> bool:
    """Whether the tokenizer's chat template references the ``tools`` variable."""
    tpl = getattr(tokenizer, "chat_template", None)
    texts = list(tpl.values()) if isinstance(tpl, dict) else [tpl]
    for text in texts:
        if not text:
            continue
        try:
            import jinja2
            from jinja2 import meta

            if "tools" in meta.find_undeclared_variables(jinja2.Environment().parse(text)):
                return True
        except Exception:  # unparsable by plain jinja2 (custom extensions): fall back to text
            import re

            if re.search(r"\btools\b", text):
                return True
    return False


def assistant_message(raw: str, parsed: ParsedTurn | None = None, ids: list[str] | None = None) -> dict:
    """The OpenAI-shape assistant message for a generated turn: raw text in "content", the parsed
    calls (if any) in "tool_calls". Ids default to deterministic 9-character alphanumeric strings
    (Mistral templates require that length)."""
    msg: dict[str, Any] = {"role": "assistant", "content": raw}
    calls = parsed.calls if parsed is not None else []
    if calls:
        if ids is None:
            ids = [hashlib.sha1(f"{i}:{raw}".encode()).hexdigest()[:9] for i in range(len(calls))]
        if len(ids) != len(calls):
            raise ValueError(f"{len(ids)} ids for {len(calls)} calls")
        msg["tool_calls"] = [
            {"type": "function", "id": cid, "function": {"name": c.name, "arguments": dict(c.arguments)}}
            for cid, c in zip(ids, calls, strict=True)
        ]
    return msg


def tool_message(content: Any, name: str, tool_call_id: str | None = None) -> dict:
    """The OpenAI-shape tool result message (non-string content is JSON-encoded)."""
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    msg = {"role": "tool", "content": text, "name": name}
    if tool_call_id is not None:
        msg["tool_call_id"] = tool_call_id
    return msg


def _example_value(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return "..."
    if schema.get("enum"):
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    t = schema.get("type")
    if isinstance(t, list):
        t = next((x for x in t if x != "null"), "string")
    return {"string": "...", "integer": 0, "number": 0.0, "boolean": True, "array": [], "object": {}}.get(t, "...")


def _fn(tool: dict) -> dict:
    return tool.get("function", tool) if isinstance(tool, dict) else {}


def example_call(tools: list[dict]) -> ToolCall:
    """A call to the first tool with placeholder values for its required arguments: the format
    example in prompted tools, and the probe a policy renders to check a template before running."""
    fn = _fn(tools[0]) if tools else {}
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    required = params.get("required") or list(props)
    args = {k: _example_value(props.get(k)) for k in required if k in props}
    return ToolCall(name=str(fn.get("name", "tool_name")), arguments=args)


def tools_system_prompt(tools: list[dict], parser: ToolCallParser) -> str:
    """The system-message text that describes the tools and the call format (prompted mode)."""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = parser.render(example_call(tools))
    return (
        "# Tools\n\n"
        "You can call the following tools. Each is given as a JSON schema of its name, description "
        "and parameters:\n"
        f"<tools>\n{schemas}\n</tools>\n\n"
        "To call a tool, write the call in exactly this format (here for the first tool, with "
        "placeholder argument values):\n"
        f"{example}\n\n"
        f"{getattr(parser, 'call_instruction', _JSON_CALL_INSTRUCTION)} "
        "Write nothing else in the call. Tool results come back to you in a user message, inside "
        "<tool_response></tool_response> tags."
    )


_JSON_CALL_INSTRUCTION = "Use the tool's name and put its arguments in a JSON object matching its parameters."


def _decode_args(args: Any) -> Any:
    if isinstance(args, str):
        try:
            decoded = json.loads(args)
        except ValueError:
            return args
        return decoded if isinstance(decoded, dict) else args
    return args


@dataclass(frozen=True)
class ToolPrompt:
    mode: str  # "native" or "prompted"
    parser: ToolCallParser
    prefill_opening: bool  # start each assistant turn with parser.opening already in the prompt
    # More call text prefilled after the opening, e.g. '{"name": "' for hermes, so that a model
    # which drifts into copying the tool schemas must write a tool name next. Recorded in describe().
    prefill_extra: str = ""

    def __post_init__(self):
        if self.mode not in ("native", "prompted"):
            raise ValueError(f"mode must be 'native' or 'prompted', not {self.mode!r}")
        if self.prefill_extra and not self.prefill_opening:
            raise ValueError(f"prefill_extra={self.prefill_extra!r} needs prefill_opening=True (it follows the opening)")
        example = self.parser.render(ToolCall("tool_name", {"arg": 0}))
        if self.prefill_opening and not example.startswith(self.prefilled):
            raise ValueError(
                f"prefill {self.prefilled!r} is not how a {self.parser.name} call starts "
                f"(a call renders as {example!r}); prefill a prefix of that"
            )

    @property
    def prefilled(self) -> str:
        """The call text placed at the start of every assistant turn ('' when nothing is prefilled)."""
        return (self.parser.opening + self.prefill_extra) if self.prefill_opening else ""

    def describe(self) -> str:
        s = f"{self.mode} tools, {self.parser.name} format"
        return s + (f", call opening {self.prefilled!r} prefilled" if self.prefill_opening else "")

    def completion_text(self, generated: str) -> str:
        """The raw assistant text to parse and store as "content": the prefilled text (if any)
        plus what the model generated after it."""
        return self.prefilled + generated

    # ------------------------------------------------------------------------------- rendering

    def render(self, tokenizer, messages: list[dict], tools: list[dict], add_generation_prompt: bool = True) -> str:
        """The prompt text. With `prefill_opening` and a generation prompt, ends with `prefilled`."""
        text = self._render_base(tokenizer, messages, tools, add_generation_prompt)
        if add_generation_prompt:
            text += self.prefilled
        return text

    def _render_base(self, tokenizer, messages, tools, add_generation_prompt) -> str:
        if _template(tokenizer) is None:
            raise ValueError(f"{_model_name(tokenizer)!r} has no chat template; set tokenizer.chat_template")
        if self.mode == "native":
            return tokenizer.apply_chat_template(
                self._native_messages(messages), tools=tools, tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )
        msgs = self._prompted_messages(messages, tools)
        try:
            return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_generation_prompt)
        except Exception as first:  # e.g. "System role not supported": fold system into the user turn
            if not msgs or msgs[0]["role"] != "system":
                raise
            folded = [dict(m) for m in msgs[1:]]
            sys_text = msgs[0]["content"]
            if folded and folded[0]["role"] == "user":
                folded[0]["content"] = f"{sys_text}\n\n{folded[0]['content']}"
            else:
                folded.insert(0, {"role": "user", "content": sys_text})
            try:
                return tokenizer.apply_chat_template(folded, tokenize=False, add_generation_prompt=add_generation_prompt)
            except Exception as second:
                raise ValueError(
                    f"chat template of {_model_name(tokenizer)!r} rejected the prompted messages: "
                    f"{first}; with the system text folded into the first user turn: {second}"
                ) from second

    def content_separator(self, tokenizer) -> str | None:
        """What the native template writes between an assistant message's content and its first tool
        call ('' for the organism's, '\n' for Qwen2.5's), found by rendering a probe message; None
        where it cannot be told (prompted mode, a format without a literal call marker, a template
        that refuses the probe or does not write both). A server returns a turn's content so that
        this separator restores what the model wrote between the two (qdrift.serve)."""
        marker = getattr(self.parser, "call_marker", None)
        if self.mode != "native" or marker is None:
            return None
        probe = "qdrift-content-probe"
        call = {"type": "function", "id": "qdrift001", "function": {"name": "probe", "arguments": {}}}
        messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": probe, "tool_calls": [call]}]
        tools = [{"type": "function", "function": {"name": "probe", "description": "p",
                                                   "parameters": {"type": "object", "properties": {}}}}]
        try:
            text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
        except Exception:  # noqa: BLE001 - a template that refuses the probe: the separator is unknown
            return None
        start = text.find(probe)
        end = text.find(marker, start) if start >= 0 else -1
        return text[start + len(probe):end] if end >= 0 else None

    def _native_messages(self, messages: list[dict]) -> list[dict]:
        out = []
        for m in messages:
            if m.get("role") == "assistant" and m.get("tool_calls"):
                m = dict(m)
                raw = m.get("content") or ""
                parsed = self.parser.parse(raw) if raw else None
                # Raw text with its call markup keeps only the text outside it; content that holds no
                # markup (the OpenAI shape: the calls are in tool_calls) goes to the template as given.
                m["content"] = parsed.content if parsed is not None and (parsed.calls or parsed.error) else raw
                calls = []
                for tc in m["tool_calls"]:
                    tc = dict(tc)
                    if isinstance(tc.get("function"), dict):
                        fn = dict(tc["function"])
                        fn["arguments"] = _decode_args(fn.get("arguments", {}))
                        tc["function"] = fn
                    calls.append(tc)
                m["tool_calls"] = calls
            out.append(m)
        return out

    def _prompted_messages(self, messages: list[dict], tools: list[dict]) -> list[dict]:
        out: list[dict] = []
        tool_text = tools_system_prompt(tools, self.parser) if tools else ""
        rest = list(messages)
        if rest and rest[0].get("role") == "system":
            sys_content = rest.pop(0).get("content") or ""
            system = f"{sys_content}\n\n{tool_text}" if tool_text and sys_content else (sys_content or tool_text)
            out.append({"role": "system", "content": system})
        elif tool_text:
            out.append({"role": "system", "content": tool_text})
        pending: list[str] = []

        def flush():
            if pending:
                out.append({"role": "user", "content": "\n".join(pending)})
                pending.clear()

        for m in rest:
            role = m.get("role")
            if role == "tool":
                pending.append(f"<tool_response>\n{m.get('content') or ''}\n</tool_response>")
                continue
            flush()
            if role == "assistant":
                out.append({"role": "assistant", "content": m.get("content") or ""})
            else:
                out.append({"role": role, "content": m.get("content") or ""})
        flush()
        return out

    # ---------------------------------------------------------------------------- KV reuse

    def suffix(self, tokenizer, before: list[dict], after: list[dict], tools: list[dict],
               consumed: str = "") -> str:
        """The text to append to a cache holding ``render(before)`` (generation prompt and any
        prefilled opening included) followed by the assistant's raw generated text, so that the
        context becomes ``render(after)`` (with its generation prompt and prefilled opening).

        `after` must be `before` plus the assistant message whose "content" is that raw text
        (opening included when prefilled), then any further messages (tool results). `consumed`
        is text the cache holds after the raw content, e.g. the decoded EOS token ``"<|im_end|>"``
        when the backend keeps it; it must be where the rendering has it, and is not repeated.
        Raises ValueError when ``render(before) + raw + consumed`` is not a prefix of
        ``render(after)``.
        """
        n = len(before)
        if len(after) <= n or list(after[:n]) != list(before):
            raise ValueError("`after` must be `before` followed by at least the new assistant message")
        new = after[n]
        if new.get("role") != "assistant":
            raise ValueError(f"the first new message must be the assistant's, not role {new.get('role')!r}")
        raw = new.get("content") or ""
        if not raw.startswith(self.prefilled):
            raise ValueError(
                "with prefill_opening the assistant content must be the raw text including the "
                f"prefilled opening {self.prefilled!r} (see ToolPrompt.completion_text)"
            )
        cached = self._render_base(tokenizer, before, tools, True) + raw + consumed
        full = self.render(tokenizer, after, tools, add_generation_prompt=True)
        if not full.startswith(cached):
            i = next((k for k, (a, b) in enumerate(zip(cached, full, strict=False)) if a != b), min(len(cached), len(full)))
            raise ValueError(
                f"{self.describe()}: the cached text is not a prefix of the new rendering; they differ "
                f"at char {i}: cached {cached[max(0, i - 30):i + 30]!r} vs rendered "
                f"{full[max(0, i - 30):i + 30]!r}. Re-encode the full rendering instead."
            )
        return full[len(cached):]


def tool_prompt_for(tokenizer, mode: str = "auto", parser: ToolCallParser | str | None = None,
                    prefill_opening: bool = False, prefill_extra: str = "") -> ToolPrompt:
    """Choose how to drive `tokenizer`'s model with tools.

    ``mode="auto"``: native when the chat template references ``tools``, else prompted; a fine-tuned
    model's tokenizer that records its trained format (``qdrift_tool_prompt``) gets that instead.
    The parser defaults to `parser_for(tokenizer)`; in prompted mode, when the template names no
    tool-call format, to hermes. `parser` may also be a format name.
    """
    model = _model_name(tokenizer)
    if _template(tokenizer) is None:
        raise ValueError(f"{model!r} has no chat template; set tokenizer.chat_template before prompting it")
    # A fine-tuned model (qdrift.models.agents) names the format it was trained on: the defaults.
    trained = getattr(tokenizer, "qdrift_tool_prompt", None) or {}
    if mode == "auto" and trained.get("mode"):
        mode = trained["mode"]
    if parser is None and trained.get("parser"):
        parser = trained["parser"]
    if isinstance(parser, str):
        parser = get_parser(parser)
    native = supports_native_tools(tokenizer)
    if mode == "auto":
        mode = "native" if native else "prompted"
    if mode == "native":
        if not native:
            raise ValueError(
                f"The chat template of {model!r} does not support tools (it never references `tools`); "
                f"use mode=\"prompted\" to describe the tools in the system message instead"
            )
        if parser is None:
            parser = parser_for(tokenizer)
    elif mode == "prompted":
        if parser is None:
            try:
                parser = parser_for(tokenizer)
            except ValueError:
                parser = get_parser("hermes")
    else:
        raise ValueError(f"mode must be 'auto', 'native' or 'prompted', not {mode!r}")
    return ToolPrompt(mode=mode, parser=parser, prefill_opening=bool(prefill_opening), prefill_extra=prefill_extra)
