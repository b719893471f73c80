"""The OpenAI chat-completions request and response shapes, as pydantic models.

Requests are strict: an unknown field, a wrong type, a malformed tool schema or a sampling option
qdrift does not implement is rejected (400) with a message naming it, instead of being ignored, so
a harness never measures something other than what it asked for. Fields that only label a request
(`user`, `metadata`, `store`) are accepted and have no effect.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "Tool",
    "error_body",
]

_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextPart(_Strict):
    type: Literal["text"]
    text: str


class FunctionCall(_Strict):
    name: str
    arguments: str  # a JSON object, encoded as a string (as OpenAI sends it)


class ToolCallIn(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    refusal: str | None = None

    @model_validator(mode="after")
    def _check_role_fields(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a 'tool' message needs 'tool_call_id' (the id of the call it answers)")
        if self.tool_calls and self.role != "assistant":
            raise ValueError(f"only 'assistant' messages carry 'tool_calls', not role {self.role!r}")
        if self.role != "assistant" and self.content is None:
            raise ValueError(f"a {self.role!r} message needs 'content'")
        return self

    def text(self) -> str:
        """The content as one string (text parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class FunctionDef(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None

    @field_validator("name")
    @classmethod
    def _check_name(cls, v: str) -> str:
        if not _TOOL_NAME.match(v):
            raise ValueError(f"tool name {v!r} must be 1-64 characters of a-z, A-Z, 0-9, '_' or '-'")
        return v

    @field_validator("parameters")
    @classmethod
    def _check_schema(cls, v: dict | None) -> dict | None:
        if v is None:
            return v
        import jsonschema

        try:
            jsonschema.Draft202012Validator.check_schema(v)
        except jsonschema.SchemaError as e:
            where = "/".join(str(p) for p in e.path) or "(top level)"
            raise ValueError(f"'parameters' is not a valid JSON schema at {where}: {e.message}") from None
        if v.get("type", "object") != "object":
            raise ValueError(f"'parameters' must be a JSON schema of type 'object', not {v.get('type')!r}")
        return v


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDef


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatCompletionRequest(_Strict):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none"] | dict | str | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = Field(default=None, ge=-(2**63), le=2**64 - 1)  # what torch.Generator.manual_seed takes
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    # Accepted only at their no-op values: anything else would be silently ignored.
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    response_format: dict | None = None
    # Labels with no effect on generation.
    user: str | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None

    @field_validator("stop")
    @classmethod
    def _check_stop(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else (v or [])
        if len(stops) > 4:
            raise ValueError(f"at most 4 stop sequences, got {len(stops)}")
        if any(not s for s in stops):
            raise ValueError("stop sequences must be non-empty strings")
        return v

    @model_validator(mode="after")
    def _check_supported(self) -> ChatCompletionRequest:
        if self.n != 1:
            raise ValueError(f"n={self.n}: qdrift serve returns one choice per request; send n requests "
                             "(with different seeds when sampling) instead")
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                raise ValueError(f"{name}={getattr(self, name)} is not supported by qdrift serve (only 0)")
        if self.logit_bias:
            raise ValueError("logit_bias is not supported by qdrift serve")
        if self.response_format not in (None, {"type": "text"}):
            raise ValueError(f"response_format {self.response_format} is not supported by qdrift serve "
                             "(it does no constrained decoding); only {'type': 'text'}")
        if self.tool_choice not in (None, "auto", "none"):
            raise ValueError(f"tool_choice {self.tool_choice!r} is not supported by qdrift serve (forcing a call "
                             "needs constrained decoding); use 'auto' or 'none'")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs=true")
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed with stream=true")
        if self.max_tokens and self.max_completion_tokens and self.max_tokens != self.max_completion_tokens:
            raise ValueError(f"max_tokens={self.max_tokens} and max_completion_tokens={self.max_completion_tokens} "
                             "disagree; give one")
        return self

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def uses_tools(self) -> bool:
        """Whether tool calls are parsed out of the output (tools given and tool_choice is not 'none')."""
        return bool(self.tools) and self.tool_choice != "none"


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error",
               code: str | None = None) -> dict:
    """OpenAI's error shape: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# ----------------------------------------------------------------------------------- responses


class ToolCallOut(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ResponseMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOut] | None = None
    refusal: None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None  # null when the token's own bytes are not known (OpenAI allows it)


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob]


class Choice(BaseModel):
    index: int = 0
    message: ResponseMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: ChoiceLogprobs | None = None


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str
    choices: list[Choice]
    usage: Usage
