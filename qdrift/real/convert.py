"""`quantize_real(model, spec)`: replace the modules a spec selects with RealQuantLinear, in place.

The same modules as the fake path (qdrift.quant.select), the same codes (qdrift.real.packing).
What has no storage format is refused, never simulated: activations, the KV cache, prefill/decode
weight splits, formats other than int4/int8/fp8e4m3, fused MoE expert banks and embeddings.
"""

from __future__ import annotations

import torch
from torch import nn

from qdrift.quant.linear import validate
from qdrift.quant.model import state_of
from qdrift.quant.select import EMBEDDING, EXPERTS, Target, select, weight_view
from qdrift.real.linear import RealQuantLinear
from qdrift.real.packing import STORABLE_TEXT, pack_weight, storage_problem
from qdrift.spec import QuantSpec, TensorScheme

SPEC_ATTR = "_qdrift_real_spec"
SUPPORTED = f"weights only: {STORABLE_TEXT}; a16 and kv:16"


def real_spec_of(model: nn.Module) -> QuantSpec | None:
    """The spec a model was really quantized with, or None."""
    return getattr(model, SPEC_ATTR, None)


def weight_scheme(spec: QuantSpec) -> TensorScheme:
    """The one weight scheme of a spec the real path can store, or a ValueError saying what is not."""
    problems = []
    acts = {f"a{s.to_string('activations')}" for s in (spec.prefill.activations, spec.decode.activations) if s}
    if acts:
        problems.append(f"activations ({' / '.join(sorted(acts))}) are quantized on the fly, not stored; "
                        "use the fake path (qdrift.quantize) for them")
    if spec.prefill.weights != spec.decode.weights:
        problems.append(f"prefill and decode weights differ ('{spec.prefill.weights}' / '{spec.decode.weights}'): "
                        "real storage holds one copy of each weight")
    if not spec.kv.is_noop:
        problems.append("KV-cache quantization has no real storage here; fake-quantize the cache on top with "
                        "qdrift.quantize(model, 'w16-a16-kv:...')")
    scheme = spec.decode.weights
    if scheme is None:
        problems.append("the spec quantizes no weights: nothing to store")
    else:
        problem = storage_problem(scheme)
        if problem:
            problems.append(problem)
    if problems:
        raise ValueError(f"spec '{spec}' cannot run on the real path: " + "; ".join(problems)
                         + f". Supported: {SUPPORTED}")
    return scheme


def _check_target(target: Target, scheme: TensorScheme) -> None:
    if target.kind in (EXPERTS, EMBEDDING):
        raise ValueError(
            f"module '{target.name}' is a {'fused MoE expert bank' if target.kind == EXPERTS else 'embedding'}, "
            f"which the real path does not store; leave such modules out with '-skip:*.{target.name.rsplit('.', 1)[-1]}'")
    if scheme.bits == 4 and target.in_features() % 2:
        raise ValueError(f"module '{target.name}': int4 packs two codes a byte, its input dim "
                         f"{target.in_features()} is odd")


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, module)


def quantize_real(model: nn.Module, spec: QuantSpec | str, *, kernel: str = "auto") -> nn.Module:
    """Store the weights `spec` selects as packed codes and return the model (changed in place).

    kernel: "auto" (fused kernels on CUDA where one applies), "dequant" or "fused" (see
    qdrift.real.kernels). The original weights are dropped: this is the memory saving.
    """
    spec = QuantSpec.parse(spec) if isinstance(spec, str) else spec
    if not isinstance(spec, QuantSpec):
        raise TypeError(f"spec must be a QuantSpec or its string form, got {type(spec).__name__}")
    if state_of(model) is not None or real_spec_of(model) is not None:
        raise ValueError("model is already quantized; quantize a fresh model")
    scheme = weight_scheme(spec)
    targets = select(model, spec)
    if not targets:
        raise ValueError(f"spec '{spec}' selects no module")
    for t in targets:
        validate(t, {"prefill": spec.prefill, "decode": spec.decode})
        _check_target(t, scheme)
    with torch.no_grad():
        for t in targets:
            weight = weight_view(t, t.module.weight.data)
            packed = pack_weight(weight, scheme, f"{t.name}.weight")
            bias = getattr(t.module, "bias", None)
            real = RealQuantLinear(packed, bias, kernel=kernel)
            real.source_kind = t.kind
            _set_module(model, t.name, real)
            del weight
    setattr(model, SPEC_ATTR, spec)
    return model


def real_modules(model: nn.Module) -> dict[str, RealQuantLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, RealQuantLinear)}


def set_kernel(model: nn.Module, kernel: str) -> None:
    """Switch every RealQuantLinear of the model to a kernel request ("auto", "dequant", "fused")."""
    for m in real_modules(model).values():
        m.set_kernel(kernel)


__all__ = ["SUPPORTED", "quantize_real", "real_modules", "real_spec_of", "set_kernel", "weight_scheme"]
