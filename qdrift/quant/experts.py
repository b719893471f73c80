"""Activation quantization inside fused MoE expert banks.

transformers stores the experts of Mixtral, Qwen-MoE, DeepSeek-V3 and GLM-4-MoE as 3-D
parameters and runs them in one module, so the input of the down projection is never visible to
a hook. When a spec quantizes activations, qdrift runs the bank with this forward instead: the
same eager loop as transformers' reference implementation, with both matmul inputs quantized.
Weights need no such help: the 3-D parameters are fake-quantized in place like any Linear.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch
from torch import nn

Quantizer = Callable[[torch.Tensor], torch.Tensor]

# The expert classes whose eager forward this reproduces (checked by tests against the original).
KNOWN = ("MixtralExperts", "Qwen2MoeExperts", "Qwen3MoeExperts", "DeepseekV3Experts", "Glm4MoeExperts")


def _forward(self, hidden_states, top_k_index, top_k_weights):
    gate_up_q, down_q = self._qdrift_act()
    final = torch.zeros_like(hidden_states)
    with torch.no_grad():
        mask = nn.functional.one_hot(top_k_index, num_classes=self.num_experts + 1).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
    for expert_idx in hit:
        expert_idx = expert_idx[0]
        if expert_idx == self.num_experts:
            continue
        top_k_pos, token_idx = torch.where(mask[expert_idx])
        state = hidden_states[token_idx]
        if gate_up_q is not None:
            state = gate_up_q(state)
        gate, up = nn.functional.linear(state, self.gate_up_proj[expert_idx]).chunk(2, dim=-1)
        inner = self.act_fn(gate) * up
        if down_q is not None:
            inner = down_q(inner)
        out = nn.functional.linear(inner, self.down_proj[expert_idx])
        out = out * top_k_weights[token_idx, top_k_pos, None]
        final.index_add_(0, token_idx, out.to(final.dtype))
    return final


def install(module: nn.Module, name: str, act: Callable[[], tuple[Quantizer | None, Quantizer | None]]) -> None:
    """Run `module` with activation quantization; `act()` returns the (gate_up, down) input quantizers."""
    cls = type(module).__name__
    if cls not in KNOWN or getattr(module, "has_bias", False):
        raise ValueError(
            f"activation quantization inside the expert bank '{name}' ({cls}) is not supported: "
            f"qdrift reproduces the eager forward of {', '.join(KNOWN)}. Quantize weights only "
            "(a16), or exclude this module with -skip:"
        )
    module._qdrift_act = act
    module.forward = types.MethodType(_forward, module)


def uninstall(module: nn.Module) -> None:
    module.__dict__.pop("forward", None)
    module.__dict__.pop("_qdrift_act", None)
