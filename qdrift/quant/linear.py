"""Fake quantization of the selected weight-carrying modules: weights once, inputs on every forward.

Each quantized weight becomes a new Parameter on its module (which also unties it from a tied
embedding), holding the quantize-dequantized values for the current phase. Switching phase
swaps `.data` pointers, never recomputes. The original Parameter is kept for `restore()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from qdrift.quant import experts
from qdrift.quant.schemes import ActivationQuantizer, check_divides, quantize_weight
from qdrift.quant.select import EMBEDDING, EXPERTS, Target, weight_unview, weight_view
from qdrift.spec import LinearScheme, TensorScheme

PHASES = ("prefill", "decode")


@dataclass
class WeightSlot:
    """One quantized parameter: its original, and its data in each phase."""

    target: Target
    param: str
    original: nn.Parameter | None
    data: dict[str, torch.Tensor]
    live: nn.Parameter

    def show(self, phase: str) -> None:
        if self.live.data_ptr() != self.data[phase].data_ptr():
            self.live.data = self.data[phase]


@dataclass
class RangeObserver:
    """Running min/max of a module's input during calibration (shared by both phases)."""

    lo: torch.Tensor | None = None
    hi: torch.Tensor | None = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lo, hi = x.detach().float().amin(), x.detach().float().amax()
        self.lo = lo if self.lo is None else torch.minimum(self.lo, lo)
        self.hi = hi if self.hi is None else torch.maximum(self.hi, hi)
        return x


@dataclass
class ModuleQuant:
    """Everything qdrift attached to one selected module."""

    target: Target
    # per phase, per input slot ("in" for a Linear; "gate_up" and "down" for an expert bank)
    acts: dict[str, dict[str, ActivationQuantizer]] = field(default_factory=dict)
    observers: dict[str, RangeObserver] = field(default_factory=dict)
    slots: list[WeightSlot] = field(default_factory=list)
    hook: object | None = None


def input_slots(target: Target) -> tuple[str, ...]:
    return ("gate_up", "down") if target.kind == EXPERTS else ("in",)


def validate(target: Target, schemes: dict[str, LinearScheme]) -> None:
    """Shape checks that need the model: group sizes must divide the dimension they split."""
    for scheme in schemes.values():
        if scheme.activations is not None and target.kind == EMBEDDING:
            raise ValueError(
                f"activations cannot be quantized on embedding '{target.name}': its input is token ids. "
                "Use a16, or select only Linear layers"
            )
        for param in target.param_names:
            dim = target.in_features(param)
            where = f"module '{target.name}' ({param}, input dim {dim})"
            if scheme.weights is not None:
                check_divides(scheme.weights, dim, where)
            if scheme.activations is not None:
                check_divides(scheme.activations, dim, where)


def attach(target: Target, schemes: dict[str, LinearScheme], state) -> ModuleQuant:
    """Create the activation quantizers of a module and install its input hook (weights come later)."""
    mq = ModuleQuant(target)
    device = next(target.module.parameters()).device
    for phase in PHASES:
        act = schemes[phase].activations
        if act is not None:
            mq.acts[phase] = {
                slot: ActivationQuantizer(act, f"{target.name}.{slot}", device) for slot in input_slots(target)
            }
    if not mq.acts:
        return mq

    def current(slot: str):
        if state.calibrating:
            return mq.observers.setdefault(slot, RangeObserver())
        return mq.acts.get(state.phase, {}).get(slot)

    if target.kind == EXPERTS:
        experts.install(target.module, target.name, lambda: (current("gate_up"), current("down")))
    else:

        def pre_hook(module, args):
            q = current("in")
            return args if q is None else (q(args[0]), *args[1:])

        mq.hook = target.module.register_forward_pre_hook(pre_hook)
    return mq


def finish_calibration(mq: ModuleQuant) -> None:
    for phase_acts in mq.acts.values():
        for slot, q in phase_acts.items():
            if not q.needs_calibration:
                continue
            obs = mq.observers.get(slot)
            if obs is None or obs.lo is None:
                raise RuntimeError(f"calibration never reached '{q.name}': no static scale can be set")
            q.scales = q.fmt.scales_from_range(obs.lo, obs.hi)
    mq.observers.clear()


def quantize_weights(mq: ModuleQuant, schemes: dict[str, LinearScheme], phase: str) -> None:
    """Fake-quantize each weight of the module once per distinct phase scheme and install it."""
    module = mq.target.module
    for param in mq.target.param_names:
        original: nn.Parameter = getattr(module, param)
        data: dict[str, torch.Tensor] = {}
        done: dict[TensorScheme | None, torch.Tensor] = {}
        for ph in PHASES:
            scheme = schemes[ph].weights
            if scheme not in done:
                if scheme is None:
                    done[scheme] = original.data
                else:
                    w = weight_view(mq.target, original.data)
                    q = quantize_weight(w, scheme, f"{mq.target.name}.{param}")
                    done[scheme] = weight_unview(mq.target, q.to(original.dtype))
            data[ph] = done[scheme]
        live = nn.Parameter(data[phase], requires_grad=False)
        setattr(module, param, live)
        mq.slots.append(WeightSlot(mq.target, param, original, data, live))


def detach(mq: ModuleQuant) -> None:
    """Undo `attach` and `quantize_weights` on one module."""
    if mq.hook is not None:
        mq.hook.remove()
    if mq.target.kind == EXPERTS:
        experts.uninstall(mq.target.module)
    for slot in mq.slots:
        if slot.original is None:
            raise RuntimeError(
                f"cannot restore '{slot.target.name}.{slot.param}': it was quantized with "
                "keep_original=False, so the full-precision weights were dropped; reload the model"
            )
        setattr(mq.target.module, slot.param, slot.original)
