"""What a spec changed in a model: which modules, how many bits per weight, KV bytes per token."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import DynamicCache

from qdrift.quant.model import cache_kwarg, state_of
from qdrift.quant.schemes import number_format, weight_bits
from qdrift.spec import QuantSpec, TensorScheme


@dataclass(frozen=True)
class LayerRow:
    name: str
    kind: str
    shape: tuple[int, ...]
    bits_prefill: float
    bits_decode: float


@dataclass(frozen=True)
class Summary:
    spec: str
    rows: list[LayerRow]
    weight_params: int  # elements in the quantized modules
    total_params: int
    bits_prefill: float  # mean storage bits per quantized weight element
    bits_decode: float
    kv_bytes_per_token: float  # all layers, keys + values, scales included
    kv_bytes_per_token_baseline: float

    def render(self) -> str:
        lines = [f"spec: {self.spec}"]
        lines.append(f"quantized modules: {len(self.rows)} ({self.weight_params:,} of {self.total_params:,} parameters)")
        if self.rows:
            width = max(len(r.name) for r in self.rows)
            for r in self.rows:
                bits = f"{r.bits_prefill:.3g}" if r.bits_prefill == r.bits_decode else (
                    f"{r.bits_prefill:.3g} prefill / {r.bits_decode:.3g} decode")
                lines.append(f"  {r.name:<{width}}  {r.kind:<9} {str(list(r.shape)):<16} {bits} bits/weight")
        pb, db = self.bits_prefill, self.bits_decode
        lines.append(f"bits per quantized weight: {pb:.3f}" + ("" if pb == db else f" prefill, {db:.3f} decode"))
        ratio = self.kv_bytes_per_token / self.kv_bytes_per_token_baseline
        lines.append(
            f"KV cache: {self.kv_bytes_per_token:,.1f} bytes/token "
            f"(unquantized {self.kv_bytes_per_token_baseline:,.1f}; x{ratio:.3f})"
        )
        return "\n".join(lines)


def _kv_bits(scheme: TensorScheme | None, head_dim: int, dtype: torch.dtype) -> float:
    if scheme is None:
        return float(torch.finfo(dtype).bits)
    fmt = number_format(scheme)
    if scheme.granularity == "token":
        return fmt.bits_per_element(head_dim)
    if scheme.granularity == "group":
        return fmt.bits_per_element(scheme.group_size)
    if scheme.granularity == "channel" and scheme.group_size:
        return fmt.bits_per_element(scheme.group_size)
    return float(fmt.bits)  # per-tensor / per-head / static per-channel: scales amortise to ~0


def kv_shapes(model: nn.Module) -> list[tuple[int, int, int, int]]:
    """(key heads, key dim, value heads, value dim) per cache layer, read from a one-token forward."""
    device = next(model.parameters()).device
    cache = DynamicCache(config=model.config)
    base = model.base_model
    name = cache_kwarg(base)
    with torch.no_grad():
        base(input_ids=torch.zeros(1, 1, dtype=torch.long, device=device), use_cache=True, **{name: cache})
    return [
        (layer.keys.shape[1], layer.keys.shape[-1], layer.values.shape[1], layer.values.shape[-1])
        for layer in cache.layers
        if getattr(layer, "keys", None) is not None and layer.keys.dim() == 4
    ]


def summarize(model: nn.Module, spec: QuantSpec | None = None, shapes=None) -> Summary:
    """Summarise a model quantized by qdrift (or, with `spec`, what that spec would do before applying it)."""
    state = state_of(model)
    spec = spec or (state.spec if state else QuantSpec())
    dtype = next(model.parameters()).dtype
    rows, n_q = [], 0
    acc = {"prefill": 0.0, "decode": 0.0}
    if state is not None:
        targets = state.targets
    elif spec.is_noop:
        targets = []
    else:  # not quantized yet: the modules the spec would select
        from qdrift.quant.select import select

        targets = select(model, spec)
    for target in targets:
        for param in target.param_names:
            w = getattr(target.module, param)
            bits = {ph: weight_bits(getattr(spec, ph).weights, dtype) for ph in acc}
            rows.append(LayerRow(f"{target.name}.{param}" if target.kind == "experts" else target.name,
                                 target.kind, tuple(w.shape), bits["prefill"], bits["decode"]))
            n_q += w.numel()
            for ph in acc:
                acc[ph] += bits[ph] * w.numel()
    total = sum(p.numel() for p in model.parameters())
    if shapes is None:
        shapes = kv_shapes_unquantized(model)
    kv = base = 0.0
    for kh, kd, vh, vd in shapes:
        kv += kh * kd * _kv_bits(spec.kv.keys, kd, dtype) / 8 + vh * vd * _kv_bits(spec.kv.values, vd, dtype) / 8
        base += (kh * kd + vh * vd) * torch.finfo(dtype).bits / 8
    return Summary(
        spec=str(spec), rows=rows, weight_params=n_q, total_params=total,
        bits_prefill=acc["prefill"] / n_q if n_q else float(torch.finfo(dtype).bits),
        bits_decode=acc["decode"] / n_q if n_q else float(torch.finfo(dtype).bits),
        kv_bytes_per_token=kv, kv_bytes_per_token_baseline=base,
    )


def kv_shapes_unquantized(model: nn.Module):
    """Cache shapes probed without triggering the KV quantizer (so no calibration is needed)."""
    state = state_of(model)
    hook_kv = state.kv if state else None
    if state:
        state.kv = []
    try:
        return kv_shapes(model)
    finally:
        if state:
            state.kv = hook_kv
