"""KV-cache fake quantization as a transformers cache layer.

Each new key/value is quantized once, when it is written (or, with a full-precision window or
per-channel dynamic key scales, once when it leaves the window / completes its token block).
The cache is never re-quantized as a whole: a decode step costs what attention costs plus the
quantization of the one new token. Unlike transformers' own quantized cache, nothing is kept in
full precision unless the spec says so (`-win<N>`), so the precision served is the one printed.

A cache layer is converted in place (its class is swapped for a subclass that quantizes on
write), so this works with `model.generate()`, with caches users build themselves, and with the
cache a model creates inside a manual forward loop.
"""

from __future__ import annotations

from abc import ABC

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

DEFERRABLE = (DynamicLayer, DynamicSlidingWindowLayer)
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

    def settle(self, states: torch.Tensor, pending: int) -> int:
        """Quantize, in place, the pending tokens that have left the window; return how many still wait."""
        if self.observing or not self.deferred:
            return 0
        ready = pending - self.window
        if self.token_block is not None:
            ready = (ready // self.token_block) * self.token_block
        if ready <= 0:
            return pending
        end = states.shape[-2]
        start = end - pending
        states[..., start : start + ready, :] = self.qdq(states[..., start : start + ready, :])
        return pending - ready


class LayerKVQuantizer:
    """The key and value quantizers of one attention layer (shared by every cache of the model)."""

    def __init__(self, kv: KVScheme, layer_idx: int):
        self.layer_idx = layer_idx
        name = f"layer {layer_idx}"
        self.keys = KVTensorQuantizer(kv.keys, kv.window, f"{name} keys") if kv.keys else None
        self.values = KVTensorQuantizer(kv.values, kv.window, f"{name} values") if kv.values else None

    def parts(self) -> list[KVTensorQuantizer]:
        return [q for q in (self.keys, self.values) if q is not None]


class QuantizedKVLayerMixin(ABC):  # noqa: B024 (a marker: classes join it by register())
    """Marker of the cache layers qdrift converted (`isinstance(layer, QuantizedKVLayerMixin)`)."""


def _update(self, base, key_states, value_states, *args, **kwargs):
    """Quantize states as they are written, then let the base layer store them."""
    q = self._qdrift
    n = key_states.shape[-2]
    if q.keys is not None:
        key_states = q.keys.on_write(key_states)
    if q.values is not None:
        value_states = q.values.on_write(value_states)
    keys, values = base.update(self, key_states, value_states, *args, **kwargs)
    pk, pv = self._qdrift_pending
    if q.keys is not None:
        pk = q.keys.settle(keys, pk + n)
    if q.values is not None:
        pv = q.values.settle(values, pv + n)
    self._qdrift_pending = _clamp(self, (pk, pv))
    return keys, values


def _stored(layer) -> int:
    return layer.keys.shape[-2] if layer.keys is not None and layer.keys.dim() == 4 else 0


def _clamp(layer, pending: tuple[int, int]) -> tuple[int, int]:
    stored = _stored(layer)
    return tuple(min(p, stored) for p in pending)


_CLASSES: dict[type, type] = {}


def quantized_layer_class(base: type) -> type:
    """A subclass of `base` that quantizes on write; it adds no slots, so a live layer can switch to it."""
    if base not in _CLASSES:

        def update(self, key_states, value_states, *args, **kwargs):
            return _update(self, base, key_states, value_states, *args, **kwargs)

        def crop(self, tokens_to_remove: int) -> None:
            # The pending (not yet quantized) tokens are the newest, so cropping removes them first:
            # what is left pending is what was pending less what went. Clamping to the stored length
            # instead counted already-quantized tokens as pending, and the next write quantized them again.
            before = _stored(self)
            base.crop(self, tokens_to_remove)
            removed = before - _stored(self)
            self._qdrift_pending = tuple(max(0, p - removed) for p in self._qdrift_pending)

        def reset(self) -> None:
            base.reset(self)
            self._qdrift_pending = (0, 0)

        # `_layer_type=None` keeps transformers from registering the subclass as a layer type.
        ns = {"_layer_type": None, "update": update, "crop": crop, "reset": reset, "__module__": __name__}
        cls = type(f"QDrift{base.__name__}", (base,), ns)
        QuantizedKVLayerMixin.register(cls)
        _CLASSES[base] = cls
    return _CLASSES[base]


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
        deferred = any(q.deferred for q in quantizers[idx].parts())
        if deferred and not isinstance(layer, DEFERRABLE):
            raise TypeError(
                f"a full-precision window or per-channel dynamic key blocks need a dynamic cache; "
                f"layer {idx} is {type(layer).__name__}"
            )
        layer.__class__ = quantized_layer_class(type(layer))
        layer._qdrift = quantizers[idx]
        layer._qdrift_pending = (0, 0)
