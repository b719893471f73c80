"""FP8 formats `fp8e4m3` (torch.float8_e4m3fn, max 448) and `fp8e5m2` (torch.float8_e5m2, max 57344).

Casts saturate: values are clamped to +-max before the cast, as serving engines do (a plain cast
gives NaN for e4m3fn or inf for e5m2 on older torch builds), so with a given scale (`@unit`,
`@static`) +-inf becomes +-max and NaN stays NaN. A dynamic scale is the block's absmax / max, so an
inf in a block makes its scale inf and the whole block NaN (inf / inf), as a dynamic-scaling engine
kernel would. Nearest rounding is torch's cast itself (round half to even), so codes are bit-exact with
`(x / scale).clamp(-max, max).to(dtype)`. With scale 1.0 ("unit") this is what engines serving FP8
KV caches without calibrated scales do.
"""

from __future__ import annotations

import torch

from qdrift.formats.base import TINY, NumberFormat, Scales, safe_div, scale_of, uniform

SCALE_BITS = 32  # fp32 block scales, as FP8 checkpoints (e.g. 128x128 block-scaled) store them


def _from_bits(bits: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return bits.to(torch.uint8).view(dtype).float()


def fp8_round(v: torch.Tensor, dtype: torch.dtype, generator: torch.Generator | None = None) -> torch.Tensor:
    """Saturating cast of float32 `v` to an fp8 dtype: nearest-even, or stochastic with `generator`.

    Stochastic rounding picks one of the two neighbouring fp8 values with probability proportional
    to the distance from the other (unbiased). FP8 is sign-magnitude, so the neighbours of a
    magnitude code m are m - 1 and m + 1 in the uint8 view.
    """
    fmax = torch.finfo(dtype).max
    v = v.clamp(-fmax, fmax)  # clamp keeps NaN
    near = v.to(dtype)
    if generator is None:
        return near
    bits = near.view(torch.uint8).to(torch.int16)
    sign, mag = bits & 0x80, bits & 0x7F
    a, near_mag = v.abs(), _from_bits(mag, dtype)
    lower = torch.where(near_mag > a, mag - 1, mag)
    upper = torch.where(near_mag < a, mag + 1, mag)
    lv, uv = _from_bits(lower, dtype), _from_bits(upper, dtype)
    gap = uv - lv
    p = torch.where(gap > 0, (a - lv) / torch.where(gap > 0, gap, torch.ones_like(gap)), torch.zeros_like(a))
    pick = torch.where(uniform(a, generator) < p, upper, lower)  # NaN: p = 0, keeps the NaN code
    return (pick | sign).to(torch.uint8).view(dtype)


class FP8Format(NumberFormat):
    """Scaled FP8: codes are the torch float8 tensor, value = code * scale."""

    bits = 8

    def __init__(self, name: str, dtype: torch.dtype):
        self.name = name
        self.dtype = dtype
        self.max = float(torch.finfo(dtype).max)

    def scales_from_range(self, lo: torch.Tensor, hi: torch.Tensor) -> Scales:
        amax = torch.maximum(lo.float().abs(), hi.float().abs())
        return Scales(scale=(amax / self.max).clamp_min(TINY))

    def _encode(self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None) -> torch.Tensor:
        scale = scale_of(scales, xb)
        # Where the scale is positive this is exactly x / scale (bit-exactness with the plain cast).
        return fp8_round(safe_div(xb, scale), self.dtype, generator)

    def _decode(self, cb: torch.Tensor, scales: Scales) -> torch.Tensor:
        q = cb.float()
        return q * scale_of(scales, q)

    def bits_per_element(self, block_size: int | None) -> float:
        """8 bits plus an fp32 scale per block (None: per-row/per-tensor scales, amortised to ~0)."""
        return 8.0 if block_size is None else 8 + SCALE_BITS / block_size
