"""Simulated vs real: how far a spec's real path (stored codes, real kernels) is from its fake path.

Quantize-dequantize in PyTorch cannot show what a kernel does differently (accumulator width,
scales rounded to the activation dtype, activations cast to FP8 for a scaled matmul), and those
differences can be large where it counts. This report measures them for one spec and one input:
- per layer, each real linear run on exactly the input its fake twin saw (so errors do not
  compound from earlier layers): max absolute and relative output error;
- end to end, the logits of the two whole models: KL(fake || real), top-1 flips, max logit error.
Both sides carry their ExecutionPath.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from qdrift.quant import quantize
from qdrift.quant.compare import compare_logits
from qdrift.quant.select import select
from qdrift.real.convert import quantize_real, real_modules, weight_scheme
from qdrift.real.path import ExecutionPath, path_of
from qdrift.spec import QuantSpec


@dataclass(frozen=True)
class LayerParity:
    name: str
    backend: str  # kernel the real linear ran
    max_abs: float  # max |y_real - y_fake|
    rel: float  # ||y_real - y_fake|| / ||y_fake||


@dataclass(frozen=True)
class ParityReport:
    spec: str
    fake: ExecutionPath
    real: ExecutionPath
    layers: list[LayerParity]
    kl_mean: float  # KL(fake || real), nats per position
    kl_max: float
    top1_flips: int  # positions whose argmax token differs
    positions: int
    max_logit_error: float
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)

    def render(self, top: int = 10) -> str:
        lines = [f"spec: {self.spec}", f"fake path: {self.fake}", f"real path: {self.real}",
                 f"end to end ({self.positions} positions): KL(fake||real) mean {self.kl_mean:.3g} nats "
                 f"(max {self.kl_max:.3g}), top-1 flips {self.top1_flips}/{self.positions}, "
                 f"max |dlogit| {self.max_logit_error:.3g}",
                 f"per layer, same input to both (worst {min(top, len(self.layers))} of {len(self.layers)} "
                 "by relative error):"]
        worst = sorted(self.layers, key=lambda r: r.rel, reverse=True)[:top]
        width = max((len(r.name) for r in worst), default=0)
        for r in worst:
            lines.append(f"  {r.name:<{width}}  max|dy| {r.max_abs:.3g}  rel {r.rel:.3g}  [{r.backend}]")
        return "\n".join(lines)


def _capture_inputs(model: nn.Module, names: list[str], inputs: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Run `model` once and keep each named module's input and output."""
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    hooks = []
    for name in names:
        module = model.get_submodule(name)
        hooks.append(module.register_forward_hook(
            lambda mod, args, out, name=name: seen.__setitem__(name, (args[0].detach(), out.detach()))))
    try:
        logits = model(inputs).logits
    finally:
        for h in hooks:
            h.remove()
    return logits, seen


def parity(model: nn.Module, spec: QuantSpec | str, inputs: torch.Tensor, *, kernel: str = "auto") -> ParityReport:
    """Compare fake and real quantization of `spec` on copies of `model` (left unchanged) for `inputs`."""
    spec = QuantSpec.parse(spec) if isinstance(spec, str) else spec
    weight_scheme(spec)  # refuse unsupported specs before copying anything
    fake_model = quantize(copy.deepcopy(model), spec)
    real_model = quantize_real(copy.deepcopy(model), spec, kernel=kernel)
    names = [t.name for t in select(model, spec)]
    with torch.no_grad():
        fake_logits, seen = _capture_inputs(fake_model, names, inputs)
        real_logits = real_model(inputs).logits
        reals = real_modules(real_model)
        layers = []
        for name in names:
            x, y_fake = seen[name]
            real = reals[name]
            y_real = real(x)
            diff = (y_real.float() - y_fake.float())
            rel = float(diff.norm() / y_fake.float().norm().clamp_min(1e-30))
            layers.append(LayerParity(name, real.last_backend, float(diff.abs().max()), rel))
    cmp = compare_logits(fake_logits, real_logits)
    flips = int((fake_logits.argmax(-1) != real_logits.argmax(-1)).sum())
    positions = fake_logits.shape[:-1].numel()
    return ParityReport(str(spec), path_of(fake_model), path_of(real_model), layers, cmp.kl_mean, cmp.kl_max,
                        flips, positions, cmp.max_abs)
