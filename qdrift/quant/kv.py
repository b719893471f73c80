"""KV-cache fake quantization as a transformers cache layer.

Each new key/value is quantized once, when it is written (or, with a full-precision window or
per-channel dynamic key scales, once when it leaves the window / completes its token block).
The cache is never re-quantized as a whole: a decode step costs what attention costs plus the
quantization of the one new token. Unlike transformers' own quantized cache, nothing is kept in
full precision unless the spec says so (`-win<N>`), so the precision served is the one printed.

A cache layer is converted in place (its class is swapped for a subclass that quantizes on
write), so this works with `model.generate()`, with caches users build themselves, and with the
cache a model creates inside a manual forward loop.

Windows and token blocks are counted in each row's real tokens. A caller that pads rows (a batched
session feeding conversations of different lengths) says which written columns are real with
`written_columns`; without it every column counts, as in `generate()`'s unpadded batches.
"""

from __future__ import annotations

from abc import ABC
from contextlib import contextmanager

import torch
from transformers.cache_utils import (
    Cache,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    StaticLayer,
    StaticSlidingWindowLayer,
)

from qdrift.formats import Scales
from qdrift.formats.fp8 import fp8_round
from qdrift.quant.schemes import check_divides, make_generator, number_format
from qdrift.spec import KVScheme, TensorScheme

DEFERRABLE = (DynamicLayer,)  # sliding ones included: convert_cache swaps them for whole layers
SUPPORTED = (DynamicLayer, DynamicSlidingWindowLayer, StaticLayer, StaticSlidingWindowLayer)


class KVTensorQuantizer:
    """Quantizes the keys (or the values) of one attention layer; states are [batch, heads, tokens, dim]."""

    def __init__(self, scheme: TensorScheme, window: int, name: str):
        self.scheme = scheme
        self.window = window
        self.name = name
        self.fmt = number_format(scheme)
        self._generators: dict[torch.device, torch.Generator | None] = {}
        self.scales: Scales | None = None
        self._scales_device: tuple[torch.device, Scales] | None = None  # scales_on's copy
        self.observing = False
        self._lo: torch.Tensor | None = None
        self._hi: torch.Tensor | None = None
        g = scheme.granularity
        self.token_block = scheme.group_size if (g == "channel" and scheme.source == "dynamic") else None
        if scheme.source == "unit":
            self.scales = Scales(scale=torch.ones(()))

    @property
    def deferred(self) -> bool:
        """Whether quantization waits for tokens to leave the window or to fill a token block."""
        return self.window > 0 or self.token_block is not None

    def generator(self, device: torch.device) -> torch.Generator | None:
        """Stochastic-rounding generator on the states' device (created on first use)."""
        if device not in self._generators:
            self._generators[device] = make_generator(self.scheme, self.name, device)
        return self._generators[device]

    def reseed(self) -> None:
        """Restart the stochastic-rounding stream from its seed (`qdrift.quant.reseed_rounding`)."""
        self._generators.clear()  # each is made again, freshly seeded, on its next use

    def scales_on(self, device: torch.device) -> Scales:
        """The fixed (unit or calibrated) scales on `device`, copied there once: a host-to-device
        copy per write would stall every decode step on a GPU until the queued kernels finish."""
        if self._scales_device is None or self._scales_device[0] != device:
            sc = self.scales
            moved = Scales(scale=sc.scale.to(device),
                           zero_point=None if sc.zero_point is None else sc.zero_point.to(device))
            self._scales_device = (device, moved)
        return self._scales_device[1]

    # --- calibration -----------------------------------------------------------------------
    def observe(self, x: torch.Tensor) -> None:
        """Record the range of states written during calibration (static scales only)."""
        if self.scheme.source != "static":
            return
        dims = {"tensor": (0, 1, 2, 3), "head": (0, 2, 3), "channel": (0, 2)}[self.scheme.granularity]
        lo, hi = x.float().amin(dim=dims), x.float().amax(dim=dims)
        self._lo = lo if self._lo is None else torch.minimum(self._lo, lo)
        self._hi = hi if self._hi is None else torch.maximum(self._hi, hi)

    def finish_calibration(self) -> None:
        self.observing = False
        if self.scheme.source != "static":
            return
        if self._lo is None:
            raise RuntimeError(f"{self.name}: calibration wrote no keys/values to this layer")
        shape = {"tensor": (), "head": (1, -1, 1, 1, 1), "channel": (1, *self._lo.shape[:1], 1, -1, 1)}
        view = shape[self.scheme.granularity]
        self.scales = self.fmt.scales_from_range(self._lo.reshape(view), self._hi.reshape(view))
        self._scales_device = None

    # --- quantization ----------------------------------------------------------------------
    def qdq(self, x: torch.Tensor) -> torch.Tensor:
        """Quantize-dequantize a run of tokens [B, H, n, D] (n a multiple of the token block)."""
        s = self.scheme
        if s.source == "unit" and s.format.startswith("fp8") and self.generator(x.device) is None:
            # Scale 1, nearest rounding: the format's saturating cast alone, in x's dtype (three
            # kernels instead of the general path's ten). Bit-exact with it (dividing and multiplying
            # by 1 are exact, the cast rounds from x's exact value, every fp8 value is exact in x's
            # dtype), and on a GPU, where eager decoding is bound by kernel launches, the difference
            # is most of the cost of an FP8 KV cache. tests/quant/test_kv.py checks the equality.
            return fp8_round(x, self.fmt.dtype).to(x.dtype)
        if s.source in ("unit", "static"):
            if self.scales is None:
                raise RuntimeError(
                    f"{self.name} uses static scales ({s}) but none were calibrated: "
                    "pass calibration=... to qdrift.quantize"
                )
            block = 1 if s.granularity == "channel" else None
            return self.fmt.fake_quantize(x, block_size=block, scales=self.scales_on(x.device),
                                          generator=self.generator(x.device))
        if self.token_block is not None:
            b, h, n, d = x.shape
            blocks = x.reshape(b, h, n // self.token_block, self.token_block, d).transpose(-1, -2)
            out = self.fmt.fake_quantize(blocks, generator=self.generator(x.device))
            return out.transpose(-1, -2).reshape(b, h, n, d)
        block = s.group_size if s.granularity == "group" else None
        return self.fmt.fake_quantize(x, block_size=block, generator=self.generator(x.device))

    def on_write(self, x: torch.Tensor) -> torch.Tensor:
        if self.observing:
            self.observe(x)
            return x
        if self.deferred:
            return x
        if self.scheme.granularity == "group":
            check_divides(self.scheme, x.shape[-1], f"{self.name} (head_dim)")
        return self.qdq(x)

    def ready(self, pending: int) -> int:
        """How many of `pending` waiting tokens may be quantized now: those past the window, in whole blocks."""
        ready = pending - self.window
        if self.token_block is not None:
            ready = (ready // self.token_block) * self.token_block
        return max(ready, 0)

    def settle(self, states: torch.Tensor, pending: list[int], real: torch.Tensor | None) -> list[int]:
        """Quantize, in place, each row's pending tokens that have left the window; return how many still
        wait per row. `real` [B, columns of `states`] marks the columns holding each row's real tokens
        (a row's pending tokens are its newest real ones); None: every column does."""
        if self.observing or not self.deferred:
            return [0] * len(pending)
        ready = [self.ready(p) for p in pending]
        if not any(ready):
            return pending
        first = pending[0]
        if all(p == first for p in pending) and (real is None or bool(real[:, real.shape[1] - first :].all())):
            # Every row's pending tokens are the same trailing columns: one slice for all rows.
            end = states.shape[-2]
            start = end - first
            states[..., start : start + ready[0], :] = self.qdq(states[..., start : start + ready[0], :])
        else:  # padding interleaves the rows' tokens: each row's own columns
            rows = [r for r, k in enumerate(ready) if k]
            if len({ready[r] for r in rows}) == 1 and self.generator(states.device) is None:
                self._settle_gathered(states, pending, ready, real, rows)
            else:  # rows settling different counts (or a random stream drawn row by row): one row at a time
                for r in rows:
                    cols = real[r].nonzero().squeeze(1)
                    take = cols[len(cols) - pending[r] : len(cols) - pending[r] + ready[r]].to(states.device)
                    row = states[r : r + 1]  # a view: writing into it writes the cache
                    row[:, :, take] = self.qdq(row[:, :, take])
        return [p - k for p, k in zip(pending, ready, strict=True)]

    def _settle_gathered(self, states, pending, ready, real, rows) -> None:
        """Rows settling the same count (every decode step once the windows are full): their columns
        gathered into one [rows, H, k, D] run, quantized at once and written back. Dynamic scales are
        per token, group or token block, so within a row: the same values as row by row."""
        rank = real[rows].cumsum(dim=1)  # each column's count of real tokens up to it
        first = rank[:, -1] - torch.tensor([pending[r] for r in rows])  # real tokens before the pending ones
        take = real[rows] & (rank > first[:, None]) & (rank <= first[:, None] + ready[rows[0]])
        cols = take.nonzero()[:, 1].reshape(len(rows), ready[rows[0]]).to(states.device)
        at = (torch.tensor(rows, device=states.device)[:, None], slice(None), cols)
        states[at] = self.qdq(states[at].transpose(1, 2)).transpose(1, 2)


class LayerKVQuantizer:
    """The key and value quantizers of one attention layer (shared by every cache of the model)."""

    def __init__(self, kv: KVScheme, layer_idx: int):
        self.layer_idx = layer_idx
        name = f"layer {layer_idx}"
        self.keys = KVTensorQuantizer(kv.keys, kv.window, f"{name} keys") if kv.keys else None
        self.values = KVTensorQuantizer(kv.values, kv.window, f"{name} values") if kv.values else None

    def parts(self) -> list[KVTensorQuantizer]:
        return [q for q in (self.keys, self.values) if q is not None]

    @property
    def deferred(self) -> bool:
        return any(q.deferred for q in self.parts())


class QuantizedKVLayerMixin(ABC):  # noqa: B024 (a marker: classes join it by register())
    """Marker of the cache layers qdrift converted (`isinstance(layer, QuantizedKVLayerMixin)`)."""


def _update(self, base, key_states, value_states, *args, **kwargs):
    """Quantize states as they are written, then let the base layer store them."""
    q = self._qdrift
    if q.keys is not None:
        key_states = q.keys.on_write(key_states)
    if q.values is not None:
        value_states = q.values.on_write(value_states)
    keys, values = base.update(self, key_states, value_states, *args, **kwargs)
    if not q.deferred:
        return keys, values
    batch, n = key_states.shape[0], key_states.shape[-2]
    new = _record_columns(self, batch, n)
    real = self._qdrift_real  # one flag per stored column: a deferred layer keeps every column (convert_cache)
    if real is not None and real.shape[1] != keys.shape[-2]:
        raise RuntimeError(f"{type(self).__name__} returned {keys.shape[-2]} columns, but {real.shape[1]} were written: "
                           "a cache layer that drops columns cannot hold a KV spec with token blocks or a window")
    pk, pv = (p or [0] * batch for p in self._qdrift_pending)
    if q.keys is not None:
        pk = q.keys.settle(keys, [p + a for p, a in zip(pk, new, strict=True)], real)
    if q.values is not None:
        pv = q.values.settle(values, [p + a for p, a in zip(pv, new, strict=True)], real)
    self._qdrift_pending = (pk, pv)
    return keys, values


def _record_columns(layer, batch: int, n: int) -> list[int]:
    """Append the written columns' real-token flags to the layer's record; return each row's real count.

    The flags come from `written_columns` (a padded batch) or are all true. The record is kept only
    once a column is padding (until then `_qdrift_real` is None and every one of `_qdrift_columns`
    is real, so an unpadded generate() copies nothing per step), and on the CPU, where counting costs
    no device synchronisation per forward.
    """
    flags = getattr(layer, "_qdrift_written", None)
    layer._qdrift_written = None  # this forward's: the next one declares its own
    if flags is not None and tuple(flags.shape) != (batch, n):
        raise ValueError(f"written_columns declared {tuple(flags.shape)} columns, but the forward wrote {(batch, n)}")
    rows = layer._qdrift_rows
    if rows is not None and rows != batch:
        raise ValueError(f"this cache holds {rows} rows, but the forward wrote {batch}; start a new cache")
    layer._qdrift_rows = batch
    if layer._qdrift_real is None and (flags is None or bool(flags.all())):
        layer._qdrift_columns += n
        return [n] * batch
    if flags is None:
        flags = torch.ones(batch, n, dtype=torch.bool)
    record = layer._qdrift_real
    if record is None:  # the first padding: every earlier column was real
        record = torch.ones(batch, layer._qdrift_columns, dtype=torch.bool)
    layer._qdrift_real = torch.cat([record, flags], dim=1)
    layer._qdrift_columns += n
    return flags.sum(dim=1).tolist()


@contextmanager
def written_columns(cache: Cache, real: torch.Tensor | None):
    """Declare, for the forward inside, which columns each row writes hold real tokens ([B, n] bool).

    A padded batch needs it when the KV spec has a window or token blocks: those count each row's own
    tokens, and padding columns are none of them. Other specs ignore it; None declares nothing.
    A quantized model declares a forward's 2D `attention_mask` by itself; a caller that knows the
    lengths on the CPU says so here instead, which spares a GPU forward the wait for the mask.
    """
    layers = _layers(cache)
    declare_written(cache, real)
    try:
        yield
    finally:
        for layer in layers:
            layer._qdrift_written = None


def declare_written(cache: Cache, real: torch.Tensor | None) -> None:
    """Give each layer not already told the real-column flags of the forward about to run (read once)."""
    untold = [layer for layer in _layers(cache) if getattr(layer, "_qdrift_written", None) is None]
    if real is None or not untold:
        return  # (a GPU mask is copied only when some layer needs it)
    real = real.to("cpu", torch.bool)
    for layer in untold:
        layer._qdrift_written = real


def _layers(cache: Cache) -> list:
    return getattr(getattr(cache, "self_attention_cache", None) or cache, "layers", [])


_CLASSES: dict[type, type] = {}


def quantized_layer_class(base: type) -> type:
    """A subclass of `base` that quantizes on write; it adds no slots, so a live layer can switch to it."""
    if base not in _CLASSES:

        def update(self, key_states, value_states, *args, **kwargs):
            return _update(self, base, key_states, value_states, *args, **kwargs)

        def crop(self, tokens_to_remove: int) -> None:
            # The pending (not yet quantized) tokens are each row's newest, so cropping removes them first:
            # what is left pending is what was pending less the row's real tokens that went. Clamping to
            # the stored length instead counted already-quantized tokens as pending, and the next write
            # quantized them again.
            before = self.get_seq_length()
            base.crop(self, tokens_to_remove)
            removed = min(before - self.get_seq_length(), self._qdrift_columns)
            if removed and self._qdrift_rows:
                self._qdrift_columns -= removed
                if self._qdrift_real is None:
                    gone = [removed] * self._qdrift_rows
                else:
                    gone = self._qdrift_real[:, self._qdrift_columns :].sum(dim=1).tolist()
                    self._qdrift_real = self._qdrift_real[:, : self._qdrift_columns]
                self._qdrift_pending = tuple([max(0, p - g) for p, g in zip(ps, gone, strict=True)] if ps else ps
                                             for ps in self._qdrift_pending)

        def reset(self) -> None:
            base.reset(self)
            _forget(self)

        def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
            base.reorder_cache(self, beam_idx)
            _select_rows(self, beam_idx.cpu())

        def batch_select_indices(self, indices: torch.Tensor) -> None:
            base.batch_select_indices(self, indices)
            _select_rows(self, torch.as_tensor(indices).cpu())

        def batch_repeat_interleave(self, repeats: int) -> None:
            base.batch_repeat_interleave(self, repeats)
            _select_rows(self, torch.arange(self._qdrift_rows or 0).repeat_interleave(repeats))

        # `_layer_type=None` keeps transformers from registering the subclass as a layer type.
        ns = {"_layer_type": None, "update": update, "crop": crop, "reset": reset, "reorder_cache": reorder_cache,
              "batch_select_indices": batch_select_indices, "batch_repeat_interleave": batch_repeat_interleave,
              "__module__": __name__}
        cls = type(f"QDrift{base.__name__}", (base,), ns)
        QuantizedKVLayerMixin.register(cls)
        _CLASSES[base] = cls
    return _CLASSES[base]


def _forget(layer) -> None:
    """No tokens pending and no columns recorded: a fresh layer's state."""
    layer._qdrift_pending = ([], [])  # per row, filled on the first write
    layer._qdrift_rows = None  # rows of the states written so far
    layer._qdrift_columns = 0  # columns written so far
    layer._qdrift_real = None  # [rows, columns] bool, which hold each row's real tokens; None: all do
    # `_qdrift_written`, the flags `written_columns` declares for the current forward, is left alone:
    # it may be set before the forward that converts the layer.


def _select_rows(layer, rows: torch.Tensor) -> None:
    """Keep the per-row record and pending counts in step with a batch operation on the states."""
    if layer._qdrift_rows is None:
        return
    if layer._qdrift_real is not None:
        layer._qdrift_real = layer._qdrift_real.index_select(0, rows)
    layer._qdrift_rows = len(rows)
    layer._qdrift_pending = tuple([ps[i] for i in rows.tolist()] if ps else ps for ps in layer._qdrift_pending)


def convert_cache(cache: Cache, quantizers: list[LayerKVQuantizer]) -> None:
    """Make every attention layer of `cache` quantize on write; refuse caches already holding full-precision states."""
    target = getattr(cache, "self_attention_cache", None) or cache
    layers = target.layers
    replicate = getattr(target, "layer_class_to_replicate", None)
    if replicate is not None:
        while len(layers) < len(quantizers):
            layers.append(replicate())
    for idx, layer in enumerate(layers[: len(quantizers)]):
        if isinstance(layer, QuantizedKVLayerMixin):
            if layer._qdrift is not quantizers[idx]:
                raise ValueError(
                    "this cache was filled by a model quantized with another spec; start a new cache"
                )
            continue
        if not isinstance(layer, SUPPORTED):
            if not hasattr(layer, "keys"):  # linear-attention / dummy layers hold no keys or values
                continue
            names = ", ".join(c.__name__ for c in SUPPORTED)
            raise TypeError(f"KV quantization supports cache layers {names}; got {type(layer).__name__}")
        if layer.get_seq_length() > 0:
            raise ValueError(
                f"cache layer {idx} already holds {layer.get_seq_length()} tokens written without KV "
                "quantization; pass a fresh cache (or none) to the quantized model"
            )
        if quantizers[idx].deferred and not isinstance(layer, DEFERRABLE):
            raise TypeError(
                f"a full-precision window or per-channel dynamic key blocks need a dynamic cache; "
                f"layer {idx} is {type(layer).__name__}"
            )
        if quantizers[idx].deferred and isinstance(layer, DynamicSlidingWindowLayer):
            # A sliding layer drops tokens before a token block completes or a window passes them, so
            # what it quantizes would depend on how it keeps columns; a whole layer keeps every token
            # and the attention mask still draws the window.
            whole = DynamicLayer()
            whole._qdrift_written = getattr(layer, "_qdrift_written", None)
            layers[idx] = layer = whole
        layer.__class__ = quantized_layer_class(type(layer))
        layer._qdrift = quantizers[idx]
        _forget(layer)
