"""OCP Microscaling formats `mxfp4` and `mxfp8` (OCP MX specification v1.0).

Each 32-element block along the last dimension shares one E8M0 scale (a power of two),
X = 2^(floor(log2(amax)) - emax_elem), with emax_elem = 2 for FP4 E2M1 and 8 for FP8 E4M3 and the
exponent clamped to [-127, 127] (spec section 6.3). Elements are x / X cast to the element format
with saturation, so the largest values of a block may clip (a known property of the spec's
floor rule). A zero block gets X = 2^-127 and zero elements.
"""

from __future__ import annotations

import torch

from qdrift.formats.base import NumberFormat, Scales, round_to_grid, safe_div, scale_of
from qdrift.formats.fp8 import fp8_round

MX_BLOCK = 32
E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127
E2M1_LEVELS: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # magnitude code 0..7
E2M1_MAX = 6.0
# Midpoints whose upper neighbour has an even code: ties there round up (round half to even).
E2M1_TIES_UP: tuple[float, ...] = (0.75, 1.75, 3.5)

_TABLES: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _e2m1_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(magnitude levels, tie-up midpoints, signed values by 4-bit code) on a device."""
    if device not in _TABLES:
        levels = torch.tensor(E2M1_LEVELS, dtype=torch.float32, device=device)
        ties = torch.tensor(E2M1_TIES_UP, dtype=torch.float32, device=device)
        _TABLES[device] = (levels, ties, torch.cat([levels, -levels]))
    return _TABLES[device]


def e2m1_encode(v: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """4-bit E2M1 codes (sign << 3 | magnitude code) of float32 v, saturating at +-6.

    Nearest rounding is round half to even; the sign is the IEEE sign bit, so -0.0 and negatives
    that round to zero keep it (code 8), as a hardware cast does.
    """
    levels, ties, _ = _e2m1_tables(v.device)
    mag = round_to_grid(v.abs().clamp(max=E2M1_MAX), levels, generator, tie_up=ties)
    return (torch.signbit(v).to(torch.uint8) << 3) | mag.to(torch.uint8)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    return _e2m1_tables(codes.device)[2][codes.long()]


def e8m0_scale(amax: torch.Tensor, emax_elem: int) -> torch.Tensor:
    """2^(floor(log2(amax)) - emax_elem), exponent clamped to [-127, 127]; amax = 0 gives 2^-127.

    floor(log2) comes from frexp, which is exact (torch.log2 rounds values just below a power of
    two up to it, and subnormals are handled too).
    """
    _, exp = torch.frexp(amax.float())  # amax = m * 2^exp, m in [0.5, 1)
    shared = torch.where(amax > 0, exp.to(torch.int32) - 1 - emax_elem, torch.full_like(exp, E8M0_MIN_EXP))
    shared = shared.clamp(E8M0_MIN_EXP, E8M0_MAX_EXP)
    return torch.ldexp(torch.ones_like(amax, dtype=torch.float32), shared)


class MXFormat(NumberFormat):
    """MX format with E2M1 (`mxfp4`) or FP8 E4M3 (`mxfp8`) elements and E8M0 block scales."""

    fixed_block = MX_BLOCK

    def __init__(self, element: str):
        if element not in ("fp4", "fp8"):
            raise ValueError(f"MX element format must be 'fp4' or 'fp8', got {element!r}")
        self.element = element
        self.name = f"mx{element}"
        self.bits = 4 if element == "fp4" else 8
        self.emax_elem = 2 if element == "fp4" else 8

    def scales_from_range(self, lo: torch.Tensor, hi: torch.Tensor) -> Scales:
        amax = torch.maximum(lo.float().abs(), hi.float().abs())
        return Scales(scale=e8m0_scale(amax, self.emax_elem))

    def _encode(self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None) -> torch.Tensor:
        v = safe_div(xb, scale_of(scales, xb))  # exact: the scale is a power of two
        if self.element == "fp4":
            return e2m1_encode(v, generator)
        return fp8_round(v, torch.float8_e4m3fn, generator)

    def _decode(self, cb: torch.Tensor, scales: Scales) -> torch.Tensor:
        values = e2m1_decode(cb) if self.element == "fp4" else cb.float()
        return values * scale_of(scales, values)

    def bits_per_element(self, block_size: int | None = None) -> float:
        """Element bits plus one 8-bit E8M0 scale per 32 elements (block_size is fixed, ignored)."""
        return self.bits + 8 / MX_BLOCK
