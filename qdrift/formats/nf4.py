"""NF4: the 4-bit NormalFloat format of QLoRA, absmax-scaled per block.

The 16 levels are quantiles of N(0, 1) rescaled to [-1, 1], with an exact zero; they suit
normally distributed weights better than a uniform grid. Callers default to 64-element blocks as
bitsandbytes does (block_size=None here means the whole row is one block).
"""

from __future__ import annotations

import torch

from qdrift.formats.base import TINY, NumberFormat, Scales, round_to_grid, safe_div, scale_of

# The NF4 table of QLoRA (Dettmers et al. 2023, "QLoRA: Efficient Finetuning of Quantized LLMs",
# appendix E), as hard-coded in bitsandbytes (csrc kernels `dDequantizeNF4`, functional.py
# `get_4bit_type("nf4")`). Code i is NF4_LEVELS[i].
NF4_LEVELS: tuple[float, ...] = (
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
)
SCALE_BITS = 32  # bitsandbytes keeps one fp32 absmax per block (without double quantization)


class NF4Format(NumberFormat):
    """NF4 with per-block absmax scaling; codes uint8 0..15, nearest level (ties to the lower one)."""

    name = "nf4"
    bits = 4

    def __init__(self) -> None:
        self._levels: dict[torch.device, torch.Tensor] = {}

    def levels(self, device: torch.device) -> torch.Tensor:
        if device not in self._levels:
            self._levels[device] = torch.tensor(NF4_LEVELS, dtype=torch.float32, device=device)
        return self._levels[device]

    def scales_from_range(self, lo: torch.Tensor, hi: torch.Tensor) -> Scales:
        amax = torch.maximum(lo.float().abs(), hi.float().abs())
        return Scales(scale=amax.clamp_min(TINY))

    def _encode(self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None) -> torch.Tensor:
        v = safe_div(xb, scale_of(scales, xb)).clamp(-1.0, 1.0)
        return round_to_grid(v, self.levels(xb.device), generator).to(torch.uint8)

    def _decode(self, cb: torch.Tensor, scales: Scales) -> torch.Tensor:
        values = self.levels(cb.device)[cb.long()]
        return values * scale_of(scales, values)

    def bits_per_element(self, block_size: int | None) -> float:
        """4 bits plus an fp32 absmax per block (bitsandbytes without double quantization)."""
        return 4.0 if block_size is None else 4 + SCALE_BITS / block_size
