"""A dynamic KV-cache layer that appends in place instead of re-concatenating its whole history.

transformers' `DynamicLayer` grows by `torch.cat([past, new])`, which copies every cached token on
every forward: at a few hundred tokens of context that copy is a fifth of a small model's CPU decode
step. This layer keeps a buffer with spare capacity (grown by half when full, so copying is amortized
O(1) per token, at the cost of up to 50% unused cache memory) and exposes the filled part as a
view, so a decode step writes one token.

It is a `DynamicLayer` in every other respect: `keys`/`values` are the cached states (a view of the
buffer), crop and batch operations work on them as usual, and a layer whose states were replaced
by such an operation rebuilds its buffer from them on the next write. qdrift's KV quantization
converts it like any dynamic layer; its in-place writes to the returned states land in the buffer.
"""

from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


class GrowingLayer(DynamicLayer):
    """`DynamicLayer` with amortized in-place appends."""

    _layer_type = None  # not registered as a transformers layer type
    min_capacity = 64  # tokens; small, since the first write may be a short prompt in a large batch

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._kbuf = self._vbuf = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = self.get_seq_length()
        add = key_states.shape[-2]
        if not self._owns_states() or n + add > self._kbuf.shape[-2]:
            self._regrow(key_states, value_states, n, n + add)
        self._kbuf[:, :, n : n + add] = key_states
        self._vbuf[:, :, n : n + add] = value_states
        self.keys = self._kbuf[:, :, : n + add]
        self.values = self._vbuf[:, :, : n + add]
        return self.keys, self.values

    def _owns_states(self) -> bool:
        """Whether `keys`/`values` are still views at the start of this layer's buffers."""
        if self._kbuf is None or self.keys is None or self.keys.dim() != 4:
            return False
        return all(s.data_ptr() == b.data_ptr() and s.shape[:2] == b.shape[:2] and s.stride() == b.stride()
                   for s, b in ((self.keys, self._kbuf), (self.values, self._vbuf)))

    def _regrow(self, key_states: torch.Tensor, value_states: torch.Tensor, n: int, need: int) -> None:
        """New buffers for at least `need` tokens (at least 1.5x the old capacity), holding the current states."""
        old = self._kbuf.shape[-2] if self._owns_states() else 0
        cap = max(need, self.min_capacity, old + old // 2)
        bufs = []
        for states, new in ((self.keys, key_states), (self.values, value_states)):
            buf = torch.empty((*new.shape[:2], cap, new.shape[-1]), dtype=new.dtype, device=new.device)
            if n:
                buf[:, :, :n] = states
            bufs.append(buf)
        self._kbuf, self._vbuf = bufs

    def reset(self) -> None:
        super().reset()
        self._kbuf = self._vbuf = None  # free the buffers; the next write allocates new ones


def growing_cache(config, whole_windows: bool = False) -> DynamicCache:
    """A `DynamicCache` for `config` whose full-attention layers append in place.

    Sliding-window layers stay transformers' own (they keep the last `window - 1` columns), or with
    `whole_windows` become growing layers too, keeping every column for masks that draw each row's
    window themselves (`qdrift.backends.row_masks`)."""
    cache = DynamicCache(config=config)
    for i, layer in enumerate(cache.layers):
        if type(layer) is DynamicLayer or (whole_windows and type(layer) is DynamicSlidingWindowLayer):
            cache.layers[i] = GrowingLayer()
    return cache
