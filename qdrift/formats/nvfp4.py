"""NVFP4: E2M1 elements in 16-element blocks, an FP8 E4M3 scale per block and an FP32 tensor scale.

The recipe follows NVIDIA's TensorRT Model Optimizer (`NVFP4QTensor`), which torchao's
`nvfp4_quantize` mirrors:

    global_scale = amax(tensor) / (6 * 448)                      FP32, per tensor
    block_scale  = fp8_e4m3(amax(block) / 6 / global_scale)      per 16 elements
    element      = e2m1(x / (block_scale * global_scale))        saturating at +-6

The global scale lets the FP8 block scales use their whole range. As in Model Optimizer, a zero
block gets block scale 1.0 and block scales are clamped to [2^-9, 448] (the smallest FP8 subnormal,
so a tiny block never gets a zero scale) before the cast. Scales.scale holds the FP8 block scales
as float32 values; the effective scale of a block is scale * global_scale.
"""

from __future__ import annotations

import torch

from qdrift.formats.base import NumberFormat, Scales, safe_div, to_blocks
from qdrift.formats.mx import E2M1_MAX, e2m1_decode, e2m1_encode

NVFP4_BLOCK = 16
FP8_MAX = 448.0
FP8_MIN_SUBNORMAL = 2.0**-9


def global_scale_of(amax: torch.Tensor) -> torch.Tensor:
    """FP32 per-tensor scale amax / (6 * 448); 1.0 for an all-zero tensor (any value works there)."""
    g = amax.float() / (E2M1_MAX * FP8_MAX)
    return torch.where(g > 0, g, torch.ones_like(g))


def block_scales_of(amax: torch.Tensor, global_scale: torch.Tensor) -> torch.Tensor:
    """FP8 E4M3 block scales (returned as float32 values) of per-block amax."""
    s = amax.float() / (E2M1_MAX * global_scale)
    s = torch.where(s == 0, torch.ones_like(s), s)
    return s.clamp(FP8_MIN_SUBNORMAL, FP8_MAX).to(torch.float8_e4m3fn).float()


class NVFP4Format(NumberFormat):
    """NVIDIA's FP4: codes are uint8 E2M1 codes (sign << 3 | magnitude code), as in MXFP4."""

    name = "nvfp4"
    bits = 4
    fixed_block = NVFP4_BLOCK

    def scales_from_range(self, lo: torch.Tensor, hi: torch.Tensor) -> Scales:
        """Block scales of per-block ranges; the global scale comes from the largest of them."""
        amax = torch.maximum(lo.float().abs(), hi.float().abs())
        g = global_scale_of(amax.amax())
        return Scales(scale=block_scales_of(amax, g), global_scale=g)

    def _scales_for_range(self, lo: torch.Tensor, hi: torch.Tensor, xb: torch.Tensor) -> Scales:
        # The global scale stays that of the unclipped tensor while clipping searches shrink blocks.
        g = global_scale_of(xb.abs().amax())
        amax = torch.maximum(lo.abs(), hi.abs())
        return Scales(scale=block_scales_of(amax, g), global_scale=g)

    def token_scales(self, x: torch.Tensor) -> Scales:
        """Dynamic scales with one global scale per row (each token of an activation) instead of per
        tensor: a tensor-wide amax would make a token's numerics depend on the other sequences and the
        padding in its batch. Serving stacks avoid that with a calibrated static global scale (qdrift's
        `@static`); dynamically, the token is the unit that does not depend on its batch."""
        amax = to_blocks(x, NVFP4_BLOCK).abs().amax(-1, keepdim=True)  # per block
        g = global_scale_of(amax.amax(-2, keepdim=True))
        return Scales(scale=block_scales_of(amax, g), global_scale=g)

    def _effective(self, scales: Scales, like: torch.Tensor) -> torch.Tensor:
        scale = scales.scale.to(device=like.device, dtype=torch.float32)
        if scales.global_scale is None:
            return scale
        return scale * scales.global_scale.to(device=like.device, dtype=torch.float32)

    def _encode(self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None) -> torch.Tensor:
        return e2m1_encode(safe_div(xb, self._effective(scales, xb)), generator)

    def _decode(self, cb: torch.Tensor, scales: Scales) -> torch.Tensor:
        values = e2m1_decode(cb)
        return values * self._effective(scales, values)

    def bits_per_element(self, block_size: int | None = None) -> float:
        """4 bits plus one FP8 scale per 16 elements (the FP32 tensor scale is negligible)."""
        return 4 + 8 / NVFP4_BLOCK
