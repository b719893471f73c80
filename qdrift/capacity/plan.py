"""Which module classes a weight precision applies to: the part of a checkpoint that is quantized.

Default plans follow what released checkpoints do:
- 8-bit (fp8, int8): every projection of the decoder (attention, dense MLP, shared and routed
  experts, the MTP projection) in the precision; embeddings, lm_head, router and norms stay bf16.
  (DeepSeek-V3, Kimi K2 and GLM FP8 releases.)
- 4-bit (int4, int4g128, nvfp4, mxfp4): the MLP weights (routed experts, dense MLP layers, the
  MTP projection) in the precision; attention, shared experts, embeddings, lm_head, router and
  norms stay bf16. This is the compressed-tensors config Moonshot ships for Kimi K2 Thinking/K2.5
  (ignore: lm_head, self_attn, shared_experts).
- 16/32-bit: everything in that precision (norms and router included).
`keep` overrides which classes stay in `keep_precision` (bf16).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from qdrift.capacity.precision import WEIGHTS, lookup
from qdrift.capacity.shape import CLASSES, ModelShape
from qdrift.spec.model import did_you_mean

KEEP_8BIT = ("embed", "lm_head", "router", "norms")
KEEP_4BIT = KEEP_8BIT + ("attention", "shared_experts")


def default_keep(weights: str) -> tuple[str, ...]:
    bits = lookup(weights, WEIGHTS, "weight").bits
    if bits >= 16:
        return ()
    return KEEP_8BIT if bits >= 8 else KEEP_4BIT


@dataclass(frozen=True)
class WeightPlan:
    """A precision per module class."""

    weights: str
    per_class: Mapping[str, str]

    def describe(self) -> str:
        groups: dict[str, list[str]] = {}
        for cls, prec in self.per_class.items():
            groups.setdefault(prec, []).append(cls)
        return "; ".join(f"{p}: {', '.join(c)}" for p, c in groups.items())


def weight_plan(weights: str, keep: Iterable[str] | None = None, keep_precision: str = "bf16") -> WeightPlan:
    lookup(weights, WEIGHTS, "weight")
    lookup(keep_precision, WEIGHTS, "keep")
    keep = tuple(default_keep(weights) if keep is None else keep)
    for cls in keep:
        if cls not in CLASSES:
            raise ValueError(f"unknown module class {cls!r} in keep.{did_you_mean(cls, CLASSES)} Valid: {', '.join(CLASSES)}")
    return WeightPlan(weights, {c: keep_precision if c in keep else weights for c in CLASSES})


def weight_bytes(shape: ModelShape, plan: WeightPlan) -> dict[str, float]:
    """Bytes per module class under a plan."""
    return {c: shape.params[c] * WEIGHTS[plan.per_class[c]].bits / 8 for c in CLASSES}
