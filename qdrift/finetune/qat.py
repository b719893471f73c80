"""Quantization-aware LoRA: the merged weight W + BA is fake-quantized in every forward pass.

Why by hand: peft computes a LoRA layer as base(x) + B(A(x)), so quantizing the base weight alone
(torchao's QAT on the frozen Linear) trains an adapter for a weight the host never serves: a host
merges the adapter and then quantizes W + BA. Here each LoRA Linear computes x (Q(W + BA))^T with
Q qdrift's own weight fake-quantization for the spec (the function `qdrift.quantize` applies after
the fact) and a straight-through gradient, so the trained forward pass is exactly what post-training
quantization of the merged model computes. peft's `get_delta_weight` gives BA (scaling included).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from qdrift.spec import QuantSpec


def check_qat_spec(text: str):
    """The weight scheme of a QAT spec such as "w4g64" (weights only, one precision, no stochastic
    rounding); ValueError naming what is wrong otherwise."""
    try:
        spec = QuantSpec.parse(text if "-" in text else f"{text}-a16-kv:16")
    except ValueError as e:
        raise ValueError(f"qat: {e}") from None
    if spec.phase_split:
        raise ValueError(f"qat: {text!r} splits prefill and decode precision; QAT trains one weight precision")
    lin = spec.prefill
    if lin.weights is None or lin.activations is not None or not spec.kv.is_noop or spec.include or spec.exclude:
        raise ValueError(f"qat: {text!r} must quantize the weights of every decoder Linear only (e.g. w4g64), "
                         "not activations or the KV cache, with no module selection")
    if lin.weights.seed is not None:
        raise ValueError(f"qat: {text!r} uses stochastic rounding; QAT needs a deterministic weight grid")
    return lin.weights


class _StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, scheme):
        from qdrift.quant.schemes import quantize_weight

        return quantize_weight(weight.detach(), scheme, "qat")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def enable_qat(peft_model, spec_text: str) -> int:
    """Make every LoRA Linear of `peft_model` compute with Q(W + BA); returns how many were changed."""
    from peft.tuners.lora import Linear as LoraLinear

    scheme = check_qat_spec(spec_text)
    changed = 0
    for module in peft_model.modules():
        if isinstance(module, LoraLinear):
            module.forward = _qat_forward(module, scheme)
            changed += 1
    if not changed:
        raise ValueError("qat: the model has no LoRA Linear layers to train quantization-aware")
    return changed


def _qat_forward(layer, scheme):
    base = layer.get_base_layer()

    def forward(x, *args, **kwargs):
        name = layer.active_adapters[0]
        merged = base.weight + layer.get_delta_weight(name)
        weight = _StraightThrough.apply(merged.float(), scheme).to(merged.dtype)
        return F.linear(x, weight.to(x.dtype) if x.dtype != weight.dtype else weight, base.bias)

    return forward
