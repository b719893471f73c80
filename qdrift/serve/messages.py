"""OpenAI request messages -> the message dicts a ToolPrompt renders.

A harness sends history back in OpenAI's shape: assistant turns as parsed `tool_calls` with
arguments as JSON strings (content often null), tool results keyed by `tool_call_id`. Native
templates write calls from `tool_calls` themselves; in prompted mode the template never sees
`tool_calls`, so the call text the model would have written (`parser.render`) is put back into the
assistant content, or the model would see its own calls vanish from the history.
"""

from __future__ import annotations

import json

from qdrift.envs.base import ToolCall
from qdrift.envs.prompting import ToolPrompt
from qdrift.serve.protocol import ChatCompletionRequest


class MessageError(ValueError):
    """A request message that cannot be rendered; `param` names where it is."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


def _arguments(raw: str, param: str) -> dict:
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as e:
        raise MessageError(f"{param} is not valid JSON: {e.msg} at char {e.pos}", param) from None
    if not isinstance(args, dict):
        raise MessageError(f"{param} must encode a JSON object, got a JSON {type(args).__name__}", param)
    return args


def prompt_messages(request: ChatCompletionRequest, prompt: ToolPrompt) -> list[dict]:
    """The conversation as ToolPrompt message dicts (roles system/user/assistant/tool)."""
    out: list[dict] = []
    call_names: dict[str, str] = {}
    for i, m in enumerate(request.messages):
        where = f"messages[{i}]"
        if m.role in ("system", "developer"):
            out.append({"role": "system", "content": m.text()})
        elif m.role == "user":
            out.append({"role": "user", "content": m.text()})
        elif m.role == "assistant":
            text = m.text()
            calls = []
            for j, tc in enumerate(m.tool_calls or []):
                args = _arguments(tc.function.arguments, f"{where}.tool_calls[{j}].function.arguments")
                call_names[tc.id] = tc.function.name
                calls.append({"type": "function", "id": tc.id,
                              "function": {"name": tc.function.name, "arguments": args}})
            if calls and prompt.mode == "prompted":
                rendered = "\n".join(prompt.parser.render(ToolCall(c["function"]["name"], c["function"]["arguments"]))
                                     for c in calls)
                # one newline between content and call, as the parser renders a turn, unless the client's
                # content already ends with one (servers that return the text before the call unstripped)
                text = (text if text.endswith("\n") else f"{text}\n") + rendered if text else rendered
            msg = {"role": "assistant", "content": text}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        else:  # tool
            name = m.name or call_names.get(m.tool_call_id or "")
            if name is None:
                raise MessageError(f"{where}: tool_call_id {m.tool_call_id!r} answers no earlier assistant tool call "
                                   f"(known ids: {sorted(call_names) or 'none'}); give the call's id or a 'name'",
                                   f"{where}.tool_call_id")
            out.append({"role": "tool", "content": m.text(), "name": name, "tool_call_id": m.tool_call_id})
    return out


def tool_dicts(request: ChatCompletionRequest) -> list[dict]:
    """The request's tools as plain dicts, the shape chat templates take."""
    return [t.model_dump(exclude_none=True) for t in request.tools or []]
