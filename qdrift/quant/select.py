"""Find the weight-carrying modules of a causal LM and select the ones a spec quantizes.

Default selection is every decoder Linear (nn.Linear, GPT-2's Conv1D, fused MoE expert banks);
the output head, embeddings and MoE routers are candidates too but only when a pattern names them
and nothing else, since serving stacks keep them in high precision: `-only:model.layers.*` or
`-only:*.mlp.*` means the decoder Linears they reach (a MoE model's routers stay as they are),
while `-only:lm_head` or `-only:*.mlp.gate` takes the head or the routers.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import torch
from torch import nn

from qdrift.spec import QuantSpec

# Kinds of weight-carrying module, by how their weight is laid out.
LINEAR = "linear"  # weight [out, in]
CONV1D = "conv1d"  # GPT-2 Conv1D, weight [in, out]
EXPERTS = "experts"  # fused MoE bank: gate_up_proj [E, 2I, H], down_proj [E, H, I], or both transposed
EMBEDDING = "embedding"  # weight [vocab, hidden]; input is token ids
ROUTER = "router"  # MoE router with a [experts, hidden] weight

EXPERT_PARAMS = ("gate_up_proj", "down_proj")


@dataclass(frozen=True)
class Target:
    name: str
    module: nn.Module
    kind: str
    default: bool  # selected when the spec names no patterns

    @property
    def param_names(self) -> tuple[str, ...]:
        return EXPERT_PARAMS if self.kind == EXPERTS else ("weight",)

    @property
    def transposed(self) -> bool:
        """Whether the weights are laid out [..., in, out] (GPT-2's Conv1D; expert banks that multiply
        `x @ W`, such as GPT-OSS and Llama 4) rather than [..., out, in]."""
        if self.kind == CONV1D:
            return True
        return self.kind == EXPERTS and experts_transposed(self.name, self.module)

    def in_features(self, param: str = "weight") -> int:
        w = getattr(self.module, param)
        return w.shape[-2] if self.transposed else w.shape[-1]


def experts_transposed(name: str, module: nn.Module) -> bool:
    """A fused expert bank's layout, from its shapes: [E, 2I, H] / [E, H, I] (Mixtral, Qwen-MoE,
    DeepSeek-V3: `F.linear(x, W[e])`) or [E, H, 2I] / [E, I, H] (GPT-OSS, Llama 4, Aria: `x @ W[e]`).
    The shapes are read rather than the class name because a bank's class says nothing transformers
    guarantees; where transformers marks the layout (`is_transposed`), the two must agree. A layout
    that is neither is refused: quantizing along the wrong axis would be silent."""
    gate_up, down = module.gate_up_proj.shape, module.down_proj.shape
    plain = gate_up[-1] == down[-2] and gate_up[-2] == 2 * down[-1]
    flipped = gate_up[-2] == down[-1] and gate_up[-1] == 2 * down[-2]
    marked = getattr(module, "is_transposed", None)
    if plain == flipped or (marked is not None and bool(marked) != flipped):
        raise ValueError(
            f"expert bank '{name}' ({type(module).__name__}): gate_up_proj {tuple(gate_up)} and down_proj "
            f"{tuple(down)} are neither [E, 2I, H] / [E, H, I] nor [E, H, 2I] / [E, I, H]"
            + (f" as its is_transposed={marked} says" if marked is not None else "")
            + ", so the input dimension is unknown; exclude it with -skip:" + name)
    return flipped


def _is_conv1d(module: nn.Module) -> bool:
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")


def _is_experts(module: nn.Module) -> bool:
    params = dict(module.named_parameters(recurse=False))
    return all(p in params and params[p].dim() == 3 for p in EXPERT_PARAMS)


def _is_router_name(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last == "gate" or "router" in last or last.endswith("expert_gate")


def _kind(name: str, module: nn.Module) -> str | None:
    if isinstance(module, nn.Embedding):
        return EMBEDDING
    if _is_experts(module):
        return EXPERTS
    if _is_conv1d(module):
        return CONV1D
    weight = getattr(module, "weight", None)
    if isinstance(module, nn.Linear):
        return ROUTER if _is_router_name(name) else LINEAR
    if "Router" in type(module).__name__ and isinstance(weight, nn.Parameter) and weight.dim() == 2:
        return ROUTER
    return None


def candidates(model: nn.Module) -> list[Target]:
    """Every module qdrift knows how to quantize, with whether the default selection takes it."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    found = []
    for name, module in model.named_modules():
        kind = _kind(name, module)
        if kind is None:
            continue
        default = kind in (LINEAR, CONV1D, EXPERTS) and module is not head
        found.append(Target(name, module, kind, default))
    return found


def select(model: nn.Module, spec: QuantSpec) -> list[Target]:
    """The modules `spec` quantizes; a pattern that matches nothing is an error, never a no-op."""
    cands = candidates(model)
    names = [t.name for t in cands]
    if spec.include:
        chosen = []
        for pattern in spec.include:
            hits = [t for t in cands if fnmatch.fnmatchcase(t.name, pattern)]
            if not hits:
                raise ValueError(_no_match("include", pattern, names))
            # A glob that also reaches decoder Linears means those; it takes the head, embeddings
            # or routers only when it names nothing else (module docstring).
            chosen += [t for t in ([t for t in hits if t.default] or hits) if t not in chosen]
    else:
        chosen = [t for t in cands if t.default]
    for pattern in spec.exclude:
        hits = [t for t in chosen if fnmatch.fnmatchcase(t.name, pattern)]
        if not hits:
            raise ValueError(_no_match("exclude", pattern, [t.name for t in chosen]))
        chosen = [t for t in chosen if t not in hits]
    return chosen


def _no_match(field: str, pattern: str, names: list[str]) -> str:
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return (
        f"{field} pattern '{pattern}' matches no quantizable module of this model "
        f"(patterns are fnmatch globs on module names, e.g. 'model.layers.*.mlp.*'). Modules: {shown}"
    )


def weight_view(target: Target, tensor: torch.Tensor) -> torch.Tensor:
    """The weight laid out [..., out, in], input dim last, as the quantizer expects."""
    return tensor.transpose(-1, -2) if target.transposed else tensor


def weight_unview(target: Target, tensor: torch.Tensor) -> torch.Tensor:
    return tensor.transpose(-1, -2).contiguous() if target.transposed else tensor
