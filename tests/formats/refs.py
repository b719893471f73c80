"""Independent, slow, obviously-correct references for the format tests (pure Python, no qdrift).

Float grids are decoded from their bit layouts by formula and rounding is done by explicit search,
so these never share code with the implementation under test (nor with torch's casts).
"""

from __future__ import annotations

import bisect
import math

import torch

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # OCP MX v1.0 table 5 (FP4 E2M1), magnitude code 0..7
FP8 = {  # name: (exponent bits, mantissa bits, bias, has_inf)
    "e4m3fn": (4, 3, 7, False),
    "e5m2": (5, 2, 15, True),
}


def fp8_decode(code: int, kind: str) -> float:
    """Value of an 8-bit FP8 code (sign | exponent | mantissa), per the OCP FP8 spec."""
    ebits, mbits, bias, has_inf = FP8[kind]
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    if e == (1 << ebits) - 1:
        if has_inf:
            return sign * math.inf if m == 0 else math.nan
        if m == (1 << mbits) - 1:  # e4m3fn: only S.1111.111 is NaN, the rest are normal numbers
            return math.nan
    if e == 0:
        return sign * (m / (1 << mbits)) * 2.0 ** (1 - bias)
    return sign * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)


def fp8_magnitudes(kind: str) -> list[float]:
    """Finite non-negative values by magnitude code 0, 1, ... (ascending, as sign-magnitude is)."""
    out = []
    for code in range(128):
        v = fp8_decode(code, kind)
        if not math.isfinite(v):
            break
        out.append(v)
    return out


def _nearest_code(a: float, mags: list[float]) -> int:
    """Magnitude code nearest to a >= 0 (a within range), ties to the even code."""
    i = bisect.bisect_left(mags, a)
    if i < len(mags) and mags[i] == a:
        return i
    lo, hi = i - 1, i
    dl, dh = a - mags[lo], mags[hi] - a
    if dl < dh:
        return lo
    if dh < dl:
        return hi
    return lo if lo % 2 == 0 else hi


def fp8_round_ref(v: float, kind: str) -> float:
    """Saturating round-to-nearest-even of v to FP8 (NaN stays NaN, +-inf -> +-max)."""
    if math.isnan(v):
        return math.nan
    mags = fp8_magnitudes(kind)
    a = min(abs(v), mags[-1])
    return math.copysign(mags[_nearest_code(a, mags)], v)


def e2m1_code_ref(v: float) -> int:
    """E2M1 code (sign << 3 | magnitude code) of v, saturating at +-6, nearest-even."""
    sign = 1 if math.copysign(1.0, v) < 0 else 0
    return sign << 3 | _nearest_code(min(abs(v), 6.0), E2M1)


def e2m1_value(code: int) -> float:
    return (-1.0 if code & 8 else 1.0) * E2M1[code & 7]


def neighbours(v: float, grid: list[float]) -> tuple[float, float]:
    """The two values of a sorted grid around v (equal when v is on the grid)."""
    i = bisect.bisect_left(grid, v)
    if i < len(grid) and grid[i] == v:
        return v, v
    return grid[max(i - 1, 0)], grid[min(i, len(grid) - 1)]


def signed_grid(mags: list[float]) -> list[float]:
    return sorted({-m for m in mags} | set(mags))


def blocks_of(x: torch.Tensor, block: int) -> list[list[float]]:
    """Rows of float32 values, split into python lists of `block` elements."""
    rows = x.float().reshape(-1, x.shape[-1]).tolist()
    return [row[i : i + block] for row in rows for i in range(0, len(row), block)]
