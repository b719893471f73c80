"""A local transformers model as an agent policy, reusing its KV cache across steps.

The runner hands the policy whole conversations; the policy keeps, per row, the exact text its
cache holds and feeds only what the conversation added since (the tool result and the next
turn's opening). So prefill work grows linearly with the horizon, not quadratically.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from qdrift.backends.generation import Generation  # noqa: F401 - re-exported: qdrift.backends.hf.Generation
from qdrift.backends.session import BatchSession
from qdrift.envs.prompting import example_call


class TemplateMismatch(RuntimeError):
    """The chat template cannot render the runner's conversation, or re-renders earlier turns
    differently, so the cache cannot be extended."""


_PROMPTED_HINT = ("drive the model with prompted tools instead (tool_prompt_for(tokenizer, mode=\"prompted\")), "
                  "which sends tool results as plain user turns")


@dataclass
class HFPolicy:
    """Drive `model` with `prompt` (a ToolPrompt: native or prompted tools, a parser)."""

    model: object
    tokenizer: object
    prompt: object
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0  # nucleus sampling (with temperature > 0); 1.0 samples the whole distribution
    seed: int = 0
    # Opt-in: keep, per row, every turn's tokens as fed: (suffix fed before generating, generated ids),
    # in `token_trace`, so a run can be replayed teacher-forced (qdrift.envs.drift).
    record_tokens: bool = False
    # Opt-in: a paged KV cache whose reads verify page ownership (qdrift.backends.paged); a row whose
    # pages fail the check ends its turn with stop_reason "kv_integrity" and the error, others go on.
    paged_kv: bool = False
    page_size: int = 16
    token_trace: list[list[tuple[list[int], list[int]]]] = field(default_factory=list, init=False, repr=False)
    _session: BatchSession | None = field(default=None, init=False, repr=False)
    _cached: list[str] = field(default_factory=list, init=False, repr=False)
    _generators: dict[int, torch.Generator] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        if self.tokenizer.pad_token_id is None:
            raise ValueError(
                f"tokenizer of {getattr(self.tokenizer, 'name_or_path', 'the model')} has no pad token, which "
                "batched episodes need: set tokenizer.pad_token (e.g. to its eos token)"
            )
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        # A turn ends at the tokenizer's eos or any end token the model's generation config names
        # (chat models often end turns with a token other than the tokenizer's eos).
        gen_config = getattr(self.model, "generation_config", None)
        self.eos_ids = set()
        for eos in (self.tokenizer.eos_token_id, getattr(gen_config, "eos_token_id", None)):
            self.eos_ids |= {eos} if isinstance(eos, int) else set(eos or [])

    def describe(self) -> dict:
        return {"backend": "transformers", "model": getattr(self.model.config, "name_or_path", ""),
                "tool_prompt": self.prompt.describe(), "temperature": self.temperature, "top_p": self.top_p,
                "seed": self.seed,
                "max_new_tokens": self.max_new_tokens}

    @property
    def tokens_fed(self) -> int:
        return self._session.tokens_fed if self._session else 0

    def _render(self, messages, tools) -> str:
        return self.prompt.render(self.tokenizer, messages, tools, add_generation_prompt=True)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def start(self, conversations: list[tuple[list[dict], list[dict]]], episode_seeds: list[int],
              policy_seeds: list[int] | None = None) -> None:
        """Begin a batch: prefill every row's initial prompt.

        Row r samples with a generator seeded from (policy seed, episode seed); `policy_seeds[r]`, when
        given, replaces `self.seed` for that row, so one batch can hold several trials of one episode
        and each row samples exactly as a policy with that seed would alone.
        """
        if conversations:
            self._check_template(*conversations[0])
        self._session = BatchSession(self.model, len(conversations), self.tokenizer.pad_token_id,
                                     paged=self.paged_kv, page_size=self.page_size)
        self._cached = [self._render(m, t) for m, t in conversations]
        self._pending = [self._encode(text) for text in self._cached]
        self._generators = {}
        self.token_trace = [[] for _ in conversations]
        if policy_seeds is not None and len(policy_seeds) != len(conversations):
            raise ValueError(f"got {len(policy_seeds)} policy seeds for {len(conversations)} conversations")
        if self.temperature > 0:
            device = self._session.device
            for r, s in enumerate(episode_seeds):
                base = self.seed if policy_seeds is None else policy_seeds[r]
                self._generators[r] = torch.Generator(device=device).manual_seed(base * 1_000_003 + s)

    def _check_template(self, messages: list[dict], tools: list[dict]) -> None:
        """Before any generation: the template must render the conversation the runner builds (each
        assistant turn as its raw text, then a tool message with the tool's name). Some native
        templates refuse that shape (Mistral-7B-Instruct-v0.3's wants 9-character tool call ids)."""
        call = example_call(tools)
        probe = [*messages, {"role": "assistant", "content": self.prompt.parser.render(call)},
                 {"role": "tool", "name": call.name, "content": "ok"}]
        try:
            self._render(probe, tools)
        except Exception as e:  # noqa: BLE001 - any template failure is the same setup error
            raise TemplateMismatch(
                f"the chat template of {getattr(self.tokenizer, 'name_or_path', '') or 'the model'!r} "
                f"({self.prompt.describe()}) cannot render an assistant turn as raw text followed by a tool "
                f"result: {type(e).__name__}: {e}; {_PROMPTED_HINT}") from e

    def extend(self, row: int, messages: list[dict], tools: list[dict]) -> None:
        """The conversation of `row` grew (a tool result); queue only the new text."""
        target = self._render(messages, tools)
        if not target.startswith(self._cached[row]):
            raise TemplateMismatch(
                f"the chat template ({self.prompt.describe()}) renders earlier turns differently once the "
                "conversation grows (e.g. it reformats the assistant's raw text), so the cached tokens cannot "
                "be extended; give the tokenizer a chat template that writes each assistant turn's raw text "
                "verbatim (tokenizer.chat_template = ...), or, where only its tool messages are rewritten, use "
                "prompted tools (tool_prompt_for(tokenizer, mode=\"prompted\"))"
            )
        self._pending[row] = self._encode(target[len(self._cached[row]):])
        self._cached[row] = target

    def respond(self, rows: list[int]) -> dict[int, Generation]:
        """Generate the next assistant turn for each of `rows` (after feeding their pending text)."""
        session = self._session
        chunks = [self._pending[r] if (r in rows and self._pending[r]) else None for r in range(session.batch)]
        tokens_in = {r: len(chunks[r] or []) for r in rows}
        logits = session.feed(chunks) if any(chunks) else session.last_logits
        opening = self.prompt.prefilled
        stops = tuple(self.prompt.parser.stop_strings)
        # Enough tokens to hold the longest stop string even one byte per token (a byte-level tokenizer
        # may split a character into up to 4): a fixed 8 missed `</tool_call>` spelt in 12 tokens.
        span = 4 * max((len(s) for s in stops), default=0) + 1

        def stop_check(row, ids):
            tail = self.tokenizer.decode(ids[-span:], skip_special_tokens=False)
            return any(s in tail for s in stops)

        outs = session.generate(logits, rows, max_new_tokens=self.max_new_tokens, eos_ids=self.eos_ids,
                                stop_check=stop_check, temperature=self.temperature, top_p=self.top_p,
                                generators=self._generators)
        result = {}
        for r in rows:
            o = outs[r]
            ids = o.token_ids[:-1] if o.stop_reason == "eos" else o.token_ids
            body = self.tokenizer.decode(ids, skip_special_tokens=False)
            full = self.tokenizer.decode(o.token_ids, skip_special_tokens=False)
            self._cached[r] += full
            if self.record_tokens:
                self.token_trace[r].append((list(chunks[r] or []), list(o.token_ids)))
            self._pending[r] = []
            result[r] = Generation(text=opening + body, token_ids=o.token_ids, logprob=sum(o.logprobs),
                                   tokens_in=tokens_in[r], tokens_out=len(o.token_ids), stop_reason=o.stop_reason,
                                   error=o.error)
        return result
