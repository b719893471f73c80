"""Batched incremental decoding over one KV cache: B conversations advance in lockstep.

Every row appends only its new tokens; rows with nothing new (or already finished) get padding
that is masked out, and positions count real tokens only, so each row computes exactly what it
would alone. The cache is whatever the model uses: a quantized model's cache quantizes on write.
Written by hand because transformers' `generate()` restarts from the full prompt and cannot
interleave new prompt text with a live cache per row.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from qdrift.backends.gqa_sdpa import applies_to, shared_kv_heads
from qdrift.backends.growing_cache import growing_cache
from qdrift.backends.paged import PagedCache, PageIntegrityError
from qdrift.backends.row_masks import row_masks, sliding_kinds, unsupported
from qdrift.quant.kv import written_columns
from qdrift.quant.model import defers_kv_quantization, forced_phase


@dataclass
class RowOutput:
    token_ids: list[int]
    logprobs: list[float]  # log-probability of each generated token under the sampling distribution
    stop_reason: str  # "eos" | "stop_string" | "max_new_tokens" | "kv_integrity"
    error: str | None = None


class BatchSession:
    """One cache, B rows. `feed` appends tokens; `generate` decodes until each row stops.

    A turn's last generated token is not run through the model when the turn ends (nothing needs
    its logits yet): it waits in `unfed[row]` and goes in front of that row's next feed, saving one
    decode forward per turn. The conversation the cache continues is always cache + `unfed`.
    Serving engines behave the same way: the token that ends a response is sampled, never run, and
    the next request prefills it, so a spec with separate prefill and decode precision sees that
    token in the prefill phase here too.
    """

    def __init__(self, model, batch: int, pad_id: int, paged: bool = False, page_size: int = 16,
                 check_pages: bool = True):
        """paged=True: a PagedCache whose reads verify page ownership; a row whose pages fail the
        check is aborted (`aborted[row]` holds the error) and the other rows go on."""
        self.model = model
        self.batch = batch
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        # A KV spec with token blocks or a full-precision window counts each row's real tokens, told
        # which columns are padding at every feed (quant.kv.written_columns). A paged cache stores
        # tokens as they are written, so the tokens such a spec settles later would never reach it.
        self.defers_kv = defers_kv_quantization(model)
        if self.defers_kv and paged:
            raise ValueError(
                f"the model's spec {self.defers_kv} has a KV part that waits for a token block or keeps a full-precision "
                "window; in a paged cache the tokens it quantizes later never reach the pages: use the dynamic cache "
                "(paged=False here, paged_kv=False in HFPolicy)")
        # Sliding-window layers keep and mask by column, and padding takes columns. A batch of such a
        # model keeps every column and masks each row's window in its own positions (row_masks); where
        # those masks cannot stand in (another attention kind or implementation), a padded batch stops
        # once its cache is wider than the window, as a padded row would lose tokens inside its window.
        kinds = sliding_kinds(model)
        problem = unsupported(model, kinds) if kinds else None
        self.row_masks = kinds if batch > 1 and kinds and not problem else None
        self.sliding_window = None
        if kinds and not self.row_masks:
            self.sliding_window = min(w for w in kinds.values() if w)
            self._no_row_masks = problem or "one row needs no per-row masks"
        if paged:
            layers = model.config.get_text_config().num_hidden_layers
            self.cache = PagedCache(layers, batch, self.device, page_size, check_pages)
        else:
            # Whole layers for sliding ones under per-row masks, and under a deferred KV spec (which
            # quantizes every token it keeps: quant.kv.convert_cache).
            self.cache = growing_cache(model.config, whole_windows=self.row_masks is not None or bool(self.defers_kv))
        self.aborted: dict[int, str] = {}
        # Only each row's last position needs logits; models that take `logits_to_keep` skip the
        # output projection elsewhere (for a small vocabulary model about a third of prefill work).
        self.keep_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        # Masked multi-token feeds share key/value heads instead of copying them (bit-identical; gqa_sdpa).
        self.share_kv_heads = applies_to(model)
        self.mask = torch.zeros(batch, 0, dtype=torch.long, device=self.device)
        self.positions = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.tokens_fed = 0  # forward tokens over all rows, padding excluded
        self.unfed: list[list[int]] = [[] for _ in range(batch)]  # generated, not yet in the cache
        self.last_logits: torch.Tensor | None = None  # [B, V]: each row's logits after its last real token

    @torch.no_grad()
    def feed(self, chunks: list[list[int] | None], phase: str = "prefill") -> torch.Tensor:
        """Append each row's tokens (after its `unfed` ones); return each row's logits after its last
        real token [B, V].

        `phase` is the precision phase of a quantized model's forward: fed tokens are "prefill"
        (a prompt, a tool result, a turn's waiting last token, as a serving engine prefills them),
        generated tokens "decode", whatever the width of the forward.

        A row fed None keeps its logits (so it can still be asked to generate) and its unfed tokens:
        a row's waiting token always enters with that row's own next feed, never with another row's
        decode step (the phase a token is computed in must not depend on what else is in the batch).
        `[]` feeds only the waiting tokens.
        """
        chunks = [None if (r in self.aborted or c is None) else (self.unfed[r] + list(c)) or None
                  for r, c in enumerate(chunks)]
        self.unfed = [[] if chunks[r] else u for r, u in enumerate(self.unfed)]
        while True:
            try:
                return self._feed(chunks, phase)
            except PageIntegrityError as e:  # raised before any layer wrote: abort that row, retry the rest
                self.aborted[e.row] = str(e)
                self.cache.pool.skip[e.row] = True
                chunks[e.row] = None
                if not any(chunks) and self.last_logits is not None:
                    return self.last_logits

    def _feed(self, chunks: list[list[int] | None], phase: str) -> torch.Tensor:
        lengths = [len(c) if c else 0 for c in chunks]
        width = max(lengths)
        if width == 0:
            raise ValueError("feed() got no tokens for any row")
        ids = torch.full((self.batch, width), self.pad_id, dtype=torch.long, device=self.device)
        new_mask = torch.zeros(self.batch, width, dtype=torch.long, device=self.device)
        for r, chunk in enumerate(chunks):
            if chunk:
                ids[r, : len(chunk)] = torch.tensor(chunk, device=self.device)
                new_mask[r, : len(chunk)] = 1
        steps = torch.arange(width, device=self.device)
        lens = torch.tensor(lengths, device=self.device)
        # Padding repeats the row's last position; it is masked, so its value does not matter.
        pos = self.positions[:, None] + torch.minimum(steps[None, :], (lens - 1).clamp_min(0)[:, None])
        mask = torch.cat([self.mask, new_mask], dim=1)
        if self.sliding_window is not None and mask.shape[1] > self.sliding_window and not bool(mask.all()):
            raise ValueError(
                f"this batch's cache reached {mask.shape[1]} columns, beyond the model's sliding window of "
                f"{self.sliding_window}, and some rows hold padding: transformers keeps and masks a sliding "
                f"window by column, so those rows would lose tokens inside their own window, and per-row masks "
                f"cannot stand in here ({self._no_row_masks}). Run this model with batch 1 (or keep "
                "conversations within the window)")
        last = (lens - 1).clamp_min(0)
        kwargs = {}
        if self.keep_logits:
            keep = torch.unique(last)  # sorted: row r's logits sit at searchsorted(keep, last[r])
            kwargs["logits_to_keep"] = keep
            at = torch.searchsorted(keep, last)
        else:
            at = last
        with shared_kv_heads(self.model, self.share_kv_heads), forced_phase(self.model, phase), \
                written_columns(self.cache, _real_flags(lengths, width) if self.defers_kv else None):
            attention = mask if self.row_masks is None else row_masks(self.model, self.row_masks, mask.bool(), pos)
            out = self.model(input_ids=ids, attention_mask=attention, position_ids=pos, cache=self.cache,
                             use_cache=True, **kwargs)
        self.mask = mask
        self.positions += lens
        self.tokens_fed += int(lens.sum())
        logits = out.logits[torch.arange(self.batch, device=self.device), at].float()
        if self.last_logits is not None:
            logits = torch.where((lens > 0)[:, None], logits, self.last_logits)
        self.last_logits = logits
        return logits

    @torch.no_grad()
    def generate(
        self,
        logits: torch.Tensor,
        rows: list[int],
        *,
        max_new_tokens: int,
        eos_ids: set[int],
        stop_check,
        temperature: float = 0.0,
        top_p: float = 1.0,
        generators: dict[int, torch.Generator] | None = None,
    ) -> dict[int, RowOutput]:
        """Decode for `rows` from `logits` (from the last feed) until EOS, a stop string or the budget.

        stop_check(row, token_ids) -> bool says whether a stop string has appeared. With `temperature`
        > 0 each token is sampled from the tempered distribution, cut to its nucleus when `top_p` < 1
        (transformers' TopPLogitsWarper); the recorded log-probability is the sampled token's under
        the distribution it was drawn from.
        """
        nucleus = None
        if temperature > 0 and top_p < 1.0:
            from transformers.generation.logits_process import TopPLogitsWarper

            nucleus = TopPLogitsWarper(top_p)
        never = [r for r in rows if int(self.positions[r]) == 0 and not self.unfed[r]]
        if never:  # its "logits" would be a padding token's
            raise ValueError(f"rows {never} were never fed a token: feed a prompt before generating")
        waiting = [r for r in rows if self.unfed[r] and r not in self.aborted]
        if waiting:  # the last turn's final tokens first
            logits = self.feed([[] if r in waiting else None for r in range(self.batch)])
        outs = {r: RowOutput([], [], "max_new_tokens") for r in rows}
        active = list(rows)
        for _ in range(max_new_tokens):
            chunks: list[list[int] | None] = [None] * self.batch
            active = [r for r in active if r not in self.aborted]
            if not active:
                break
            for r in active:
                scores = logits[r] / (temperature or 1.0)
                if nucleus is not None:
                    scores = nucleus(None, scores[None].float())[0]
                logp = torch.log_softmax(scores, dim=-1)
                if temperature > 0:
                    gen = generators.get(r) if generators else None
                    tok = int(torch.multinomial(logp.exp(), 1, generator=gen))
                else:
                    tok = int(logp.argmax())
                outs[r].token_ids.append(tok)
                outs[r].logprobs.append(float(logp[tok]))
                chunks[r] = [tok]
            still = []
            for r in active:
                ids = outs[r].token_ids
                if ids[-1] in eos_ids:
                    outs[r].stop_reason = "eos"
                elif stop_check(r, ids):
                    outs[r].stop_reason = "stop_string"
                elif len(ids) < max_new_tokens:
                    still.append(r)
                    continue
                self.unfed[r], chunks[r] = chunks[r], None  # the turn is over: its last token waits
            active = still
            if not active:
                break
            logits = self.feed(chunks, phase="decode")
        for r in rows:
            if r in self.aborted:
                outs[r].stop_reason, outs[r].error = "kv_integrity", self.aborted[r]
        return outs


def _real_flags(lengths: list[int], width: int) -> torch.Tensor:
    """[B, width] bool on the CPU: which of a feed's columns hold each row's real tokens (built from the
    lengths, so a GPU session waits on nothing to tell the KV cache)."""
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
