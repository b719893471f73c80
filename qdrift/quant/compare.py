"""Divergence of a quantized model from its baseline: logits, and weights layer by layer."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from qdrift.quant.model import state_of


@dataclass(frozen=True)
class LogitComparison:
    kl_mean: float  # KL(baseline || quantized), nats per position
    kl_max: float
    top1_agreement: float  # share of positions whose argmax token is unchanged
    max_abs: float  # largest absolute logit difference


def kl_divergence(logp_base: torch.Tensor, logp_variant: torch.Tensor) -> torch.Tensor:
    """KL(base || variant) over the last axis of two log-probability tensors.

    A token the base rules out (a -inf log-probability, e.g. a masked vocabulary entry) adds 0, not
    0 * (-inf - -inf) = nan; one only the variant rules out makes the KL inf, as it should.
    """
    return torch.where(torch.isneginf(logp_base), 0.0, logp_base.exp() * (logp_base - logp_variant)).sum(-1)


def compare_logits(baseline: torch.Tensor, quantized: torch.Tensor) -> LogitComparison:
    """Compare two logit tensors [..., vocab] position by position."""
    b, v = baseline.double(), quantized.double()
    kl = kl_divergence(torch.log_softmax(b, dim=-1), torch.log_softmax(v, dim=-1))
    agree = (baseline.argmax(-1) == quantized.argmax(-1)).float().mean()
    same = b == v  # equal entries, infinite ones included, differ by 0 (inf - inf would be nan)
    return LogitComparison(
        kl_mean=float(kl.mean()), kl_max=float(kl.max()), top1_agreement=float(agree),
        max_abs=float(torch.where(same, 0.0, (b - v).abs()).max()),
    )


@dataclass(frozen=True)
class WeightError:
    name: str
    phase: str
    sqnr_db: float  # signal-to-quantization-noise ratio; higher is better
    rel_error: float  # ||w_q - w|| / ||w||


def weight_errors(model: nn.Module) -> list[WeightError]:
    """Per quantized weight and phase: how far the fake-quantized weight is from the original."""
    state = state_of(model)
    if state is None:
        raise ValueError("model is not quantized by qdrift")
    rows = []
    for mq in state.modules:
        for slot in mq.slots:
            if slot.original is None:
                raise ValueError("weights were quantized with keep_original=False: no reference to compare to")
            ref = slot.original.data.float()
            for phase, data in slot.data.items():
                err = (data.float().to(ref.device) - ref).norm()
                rel = float(err / ref.norm().clamp_min(1e-30))
                sqnr = float("inf") if err == 0 else float(20 * torch.log10(ref.norm() / err))
                rows.append(WeightError(f"{slot.target.name}.{slot.param}", phase, sqnr, rel))
    return rows
