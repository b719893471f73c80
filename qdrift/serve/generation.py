"""One chat turn of the served model: render, decode token by token, parse tool calls.

The turn is rendered through the model's ToolPrompt, the same rendering the episode runner uses,
so a harness talking to the server sees the prompt qdrift's own agents see. Decoding is a short
loop over the model with a transformers cache rather than `model.generate()`, for two reasons:
generate() samples from the process-wide RNG (a seeded request would reseed every other user of
torch), and its streamers see token ids but not the scores that streamed logprobs need. Sampling
itself uses transformers' logits warpers (temperature, top-p).
"""

from __future__ import annotations

import secrets
import string
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch

from qdrift.envs.base import ToolCall
from qdrift.envs.prompting import ToolPrompt
from qdrift.serve.messages import prompt_messages, tool_dicts
from qdrift.serve.protocol import ChatCompletionRequest

__all__ = ["Sampling", "StepToken", "PreparedTurn", "Turn", "ServedModel", "RequestError"]


class RequestError(ValueError):
    """A request the model cannot serve as asked (400); `param` names the field."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Sampling:
    max_tokens: int
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    seed: int | None = None  # None: a fresh random seed
    stop: tuple[str, ...] = ()  # the request's stop sequences: generation ends there, cut from the text
    call_stops: tuple[str, ...] = ()  # the parser's end-of-call strings: generation ends there, kept
    top_logprobs: int | None = None  # None: no logprobs; k >= 0: the chosen token's and the top k


@dataclass(frozen=True)
class StepToken:
    id: int
    logprob: float  # under the model's own distribution (raw logits), whatever the sampling
    top: tuple[tuple[int, float], ...] = ()  # (id, logprob) of the most likely tokens, when asked
    stop_reason: str | None = None  # set on the last token: "eos", "stop", "call_end" or "length"


@dataclass
class PreparedTurn:
    prompt: ToolPrompt  # the ToolPrompt this turn renders with (no call prefill without tools)
    text: str  # the rendered prompt, any prefilled call opening included
    ids: list[int]
    uses_tools: bool
    sampling: Sampling


@dataclass
class Turn:
    text: str  # raw assistant text: prefill + generated, end token dropped, cut at a stop sequence
    content: str | None
    calls: list[ToolCall]
    call_ids: list[str]
    finish_reason: str  # "stop" | "length" | "tool_calls"
    prompt_tokens: int
    tokens: list[StepToken] = field(default_factory=list)
    parse_error: str | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self.tokens)


def _call_id() -> str:
    # 9 alphanumerics: the one id shape every chat template accepts (Mistral's require exactly 9).
    return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """How many trailing characters might still become a stop sequence (or finish a UTF-8 char)."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    if text.endswith("\ufffd"):
        hold = max(hold, 1)
    return hold


def _refuse_surrogates(request: ChatCompletionRequest) -> None:
    """RequestError for a lone surrogate anywhere in the request's text (JSON's \\ud800 escapes decode to
    one, which no tokenizer can encode: it was a 500 with a plain-text body)."""
    def walk(value, where: str):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as e:
                raise RequestError(f"{where} holds a lone surrogate (U+{ord(value[e.start]):04X} at character "
                                   f"{e.start}), which is not valid Unicode text", where.split("[")[0]) from None
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(k, where)
                walk(v, f"{where}.{k}")
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{where}[{i}]")

    for name in ("messages", "tools", "stop"):
        walk(request.model_dump(include={name}).get(name), name)


class ServedModel:
    """A loaded (optionally quantized) model with its tokenizer, ToolPrompt and the spec it carries."""

    def __init__(self, model, tokenizer, prompt: ToolPrompt, name: str, spec: str | None,
                 default_max_tokens: int = 512, max_tokens_limit: int | None = None):
        if max_tokens_limit is not None and max_tokens_limit < 1:
            raise ValueError(f"max_tokens_limit must be >= 1 or None, got {max_tokens_limit}")
        self.max_tokens_limit = max_tokens_limit  # the most a request may ask for (None: the context)
        if max_tokens_limit is not None:
            default_max_tokens = min(default_max_tokens, max_tokens_limit)
        self.model = model
        self.tokenizer = tokenizer
        self.prompt = prompt
        self.name = name
        self.spec = spec  # canonical spec string, or None for the unquantized model
        self.default_max_tokens = default_max_tokens
        gen_config = getattr(model, "generation_config", None)
        self.eos_ids: set[int] = set()
        for eos in (tokenizer.eos_token_id, getattr(gen_config, "eos_token_id", None)):
            self.eos_ids |= {eos} if isinstance(eos, int) else set(eos or [])
        if not self.eos_ids:
            raise ValueError(f"{name}: neither the tokenizer nor the generation config names an end token")
        self.context = getattr(model.config.get_text_config(), "max_position_embeddings", None)
        self.device = next(model.parameters()).device
        self.content_separator = prompt.content_separator(tokenizer)

    @property
    def fingerprint(self) -> str:
        """qdrift-<version>-<spec hash> ('baseline' when unquantized): what a client measured."""
        from qdrift.spec.fingerprint import served_fingerprint

        return served_fingerprint(self.spec)

    # ------------------------------------------------------------------------------ prepare

    def prepare(self, request: ChatCompletionRequest) -> PreparedTurn:
        _refuse_surrogates(request)
        uses_tools = request.uses_tools
        prompt = self.prompt if uses_tools else replace(self.prompt, prefill_opening=False, prefill_extra="")
        messages = prompt_messages(request, prompt)
        try:
            text = prompt.render(self.tokenizer, messages, tool_dicts(request), add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - a template error is the request's problem: say what it was
            raise RequestError(f"the chat template of {self.name} rejected the messages: {e}", "messages") from None
        ids = self.tokenizer(text, add_special_tokens=False).input_ids
        explicit = request.max_completion_tokens or request.max_tokens
        if explicit and self.max_tokens_limit is not None and explicit > self.max_tokens_limit:
            raise RequestError(f"max_tokens {explicit} exceeds this server's limit of {self.max_tokens_limit} "
                               "(qdrift serve --max-tokens-limit)", "max_tokens")
        max_tokens = explicit or self.default_max_tokens
        if self.context is not None:
            room = self.context - len(ids)
            if room < 1:
                raise RequestError(f"the prompt is {len(ids)} tokens; {self.name} has a context of {self.context}",
                                   "messages")
            if max_tokens > room:
                if explicit:
                    raise RequestError(f"prompt ({len(ids)} tokens) + max_tokens ({explicit}) exceeds the "
                                       f"context length {self.context} of {self.name}; ask for at most {room}",
                                       "max_tokens")
                max_tokens = room
        sampling = Sampling(
            max_tokens=max_tokens,
            temperature=1.0 if request.temperature is None else request.temperature,
            top_p=1.0 if request.top_p is None else request.top_p,
            seed=request.seed,
            stop=request.stop_sequences,
            # One call per turn only when asked: by default a turn may hold parallel calls.
            call_stops=tuple(prompt.parser.stop_strings) if uses_tools and request.parallel_tool_calls is False else (),
            top_logprobs=(request.top_logprobs or 0) if request.logprobs else None,
        )
        return PreparedTurn(prompt, text, ids, uses_tools, sampling)

    # ------------------------------------------------------------------------------- decode

    def _pick(self, logits: torch.Tensor, sampling: Sampling, gen: torch.Generator | None, ids: torch.Tensor) -> int:
        if sampling.temperature == 0:
            return int(logits.argmax())
        from transformers.generation import LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

        warpers = LogitsProcessorList([TemperatureLogitsWarper(sampling.temperature)])
        if sampling.top_p < 1:
            warpers.append(TopPLogitsWarper(sampling.top_p))
        scores = warpers(ids, logits[None].clone())[0]
        return int(torch.multinomial(torch.softmax(scores, dim=-1), 1, generator=gen))

    def generated_text(self, turn: PreparedTurn, ids: list[int]) -> str:
        """The raw assistant text for generated `ids`: prefill + decoded text, a final end token dropped."""
        body = ids[:-1] if ids and ids[-1] in self.eos_ids else ids
        return turn.prompt.prefilled + self.tokenizer.decode(body, skip_special_tokens=False,
                                                             clean_up_tokenization_spaces=False)

    @torch.no_grad()
    def decode(self, turn: PreparedTurn, cancel: threading.Event | None = None) -> Iterator[StepToken]:
        """Yield generated tokens one by one; the last carries its stop_reason. Not thread-safe:
        the caller serializes (the app holds one lock per model). A set `cancel` (the client went away)
        ends decoding before the next token's forward, without a stop reason."""
        from transformers import DynamicCache

        s = turn.sampling
        gen = None
        if s.temperature > 0:
            seed = s.seed if s.seed is not None else secrets.randbits(63)
            gen = torch.Generator(device=self.device).manual_seed(seed)
        cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([turn.ids], device=self.device)
        out = self.model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        generated: list[int] = []
        stops = s.stop + s.call_stops
        for step in range(s.max_tokens):
            logits = out.logits[0, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            tok = self._pick(logits, s, gen, ids)
            top: tuple = ()
            if s.top_logprobs:
                vals, idx = logp.topk(s.top_logprobs)
                top = tuple(zip(idx.tolist(), vals.tolist(), strict=True))
            generated.append(tok)
            reason = None
            if tok in self.eos_ids:
                reason = "eos"
            elif stops:
                _, hit_user = _cut_at_stop(self.generated_text(turn, generated), s.stop)
                if hit_user:
                    reason = "stop"
                elif any(c in self.generated_text(turn, generated) for c in s.call_stops):
                    reason = "call_end"
            if reason is None and step == s.max_tokens - 1:
                reason = "length"
            yield StepToken(tok, float(logp[tok]), top, reason)
            if reason is not None:
                return
            if cancel is not None and cancel.is_set():
                return
            ids = torch.tensor([[tok]], device=self.device)
            out = self.model(input_ids=ids, cache=cache, use_cache=True)

    # ------------------------------------------------------------------------------- finish

    def finish(self, turn: PreparedTurn, tokens: list[StepToken]) -> Turn:
        """The turn's message: tool calls parsed out when the request has tools, and why it ended."""
        text, _ = _cut_at_stop(self.generated_text(turn, [t.id for t in tokens]), turn.sampling.stop)
        reason = tokens[-1].stop_reason if tokens else "length"
        calls: list[ToolCall] = []
        content: str | None = text
        error = None
        if turn.uses_tools:
            parsed = turn.prompt.parser.parse(text)
            error = parsed.error
            # A turn whose call markup does not parse is returned as text, as OpenAI-compatible servers
            # do: the harness sees exactly what the model wrote and scores it as a malformed call.
            if parsed.calls and parsed.error is None:
                calls = list(parsed.calls)
                content = _content_before_calls(text, parsed, turn.prompt.parser, self.content_separator)
        finish = "length" if reason == "length" else ("tool_calls" if calls else "stop")
        return Turn(text=text, content=content, calls=calls, call_ids=[_call_id() for _ in calls],
                    finish_reason=finish, prompt_tokens=len(turn.ids), tokens=list(tokens), parse_error=error)

    def stream_text(self, turn: PreparedTurn, tokens: list[StepToken], emitted: str) -> str:
        """The text that can be sent now, past `emitted`: never part of a stop sequence or half a character."""
        text = self.generated_text(turn, [t.id for t in tokens])
        cut, hit = _cut_at_stop(text, turn.sampling.stop)
        safe = cut if hit else cut[: len(cut) - _held_back(cut, turn.sampling.stop)]
        return safe[len(emitted):] if safe.startswith(emitted) else ""


def _content_before_calls(text: str, parsed, parser, separator: str | None) -> str | None:
    """The content of a turn with calls, such that the chat template, which writes `separator`
    between content and calls, renders back what the model wrote: the text before the call markup
    minus that separator (the organism's template writes none, so the content keeps the model's
    newline; Qwen2.5's writes one). The parser's stripped content where that cannot be matched
    (text after the calls too, a separator the model did not write, an unknown one); None when empty."""
    marker = getattr(parser, "call_marker", None)
    at = text.find(marker) if marker else -1
    if not parsed.content:
        return None
    if at >= 0 and separator is not None and text[:at].endswith(separator):
        lead = text[:at - len(separator)] if separator else text[:at]
        if lead.strip() == parsed.content:
            return lead
    return parsed.content
