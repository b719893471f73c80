"""Shared types and helpers of the number formats: blocking, rounding, clipping search.

Every format quantizes along the last dimension in blocks with one scale per block. Callers
(the quantization layers) reshape tensors so that blocks mean per-tensor, per-channel,
per-group, per-token or per-head; nothing here knows about layers.
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import torch

# Smallest positive normal float32: floors scales so that all-zero blocks give 0/scale = 0, never NaN.
TINY = torch.finfo(torch.float32).tiny
CLIP_CHOICES = ("absmax", "mse", "p<percent>")
# Clipping ratios of the absmax tried by clip="mse"; 1.0 first so that ties keep the absmax scale.
MSE_RATIOS: tuple[float, ...] = tuple(1.0 - 0.5 * i / 99 for i in range(100))


@dataclass(frozen=True)
class Scales:
    """Per-block quantization parameters.

    `scale` has shape x.shape[:-1] + (n_blocks, 1), or anything broadcastable to it (a 0-d tensor for
    a per-tensor or unit scale). `zero_point` (asymmetric integers only) holds integer values in
    float32. `global_scale` is NVFP4's per-tensor FP32 scale (0-d).
    """

    scale: torch.Tensor
    zero_point: torch.Tensor | None = None
    global_scale: torch.Tensor | None = None


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def check_block_size(dim: int, block_size: int | None) -> int:
    """The block length along a last dimension of size `dim`; raises a ValueError naming valid sizes."""
    if block_size is None:
        return dim
    if not isinstance(block_size, int) or block_size <= 0 or dim % block_size != 0:
        raise ValueError(
            f"block_size {block_size!r} does not divide the last dimension {dim}; "
            f"valid block sizes for {dim}: {divisors(dim)} (or None for one block per row)"
        )
    return block_size


def to_blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    """View x (..., D) as float32 blocks (..., D // block, block)."""
    return x.float().reshape(*x.shape[:-1], x.shape[-1] // block, block)


def safe_div(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x / scale, with 0 where the scale is 0 (a zero block, or a flushed subnormal scale)."""
    return torch.where(scale > 0, x / scale, torch.zeros_like(x))


def scale_of(scales: Scales, like: torch.Tensor) -> torch.Tensor:
    """The scale tensor in float32 on the device of `like`."""
    return scales.scale.to(device=like.device, dtype=torch.float32)


def uniform(like: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    return torch.rand(like.shape, generator=generator, device=like.device, dtype=torch.float32)


def round_int(v: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Round to integers: half-to-even, or stochastically (up with probability v - floor(v))."""
    if generator is None:
        return torch.round(v)
    low = torch.floor(v)
    return low + (uniform(v, generator) < (v - low)).float()


def round_to_grid(
    v: torch.Tensor,
    levels: torch.Tensor,
    generator: torch.Generator | None,
    tie_up: torch.Tensor | None = None,
) -> torch.Tensor:
    """Index of the level of a sorted table that v rounds to (v must lie within the table's range).

    Nearest: ties go to the lower level, except at the midpoints listed in `tie_up` (used to make
    E2M1 round half to even). Stochastic: one of the two neighbouring levels, with probability
    proportional to the distance from the other one, so the expectation is v.
    """
    if generator is None:
        mids = (levels[1:] + levels[:-1]) / 2
        idx = torch.bucketize(v, mids)  # number of midpoints strictly below v
        if tie_up is not None:
            idx = idx + torch.isin(v, tie_up).long()
        return idx
    n = levels.numel()
    lower = (torch.bucketize(v, levels, right=True) - 1).clamp(0, n - 1)
    upper = (lower + 1).clamp(max=n - 1)
    lv, uv = levels[lower], levels[upper]
    gap = uv - lv
    p = torch.where(gap > 0, (v - lv) / torch.where(gap > 0, gap, torch.ones_like(gap)), torch.zeros_like(v))
    return torch.where(uniform(v, generator) < p, upper, lower)


def parse_clip(clip: str) -> tuple[str, float | None]:
    """("absmax", None), ("mse", None) or ("percentile", p) for clip strings like "p99.9"."""
    if clip in ("absmax", "mse"):
        return clip, None
    m = re.fullmatch(r"p(\d+(?:\.\d*)?)", clip) if isinstance(clip, str) else None
    if m is not None and 0 < float(m.group(1)) <= 100:
        return "percentile", float(m.group(1))
    raise ValueError(
        f"clip must be one of {', '.join(repr(c) for c in CLIP_CHOICES)} "
        f"(percent in (0, 100], e.g. 'p99.9'); got {clip!r}"
    )


def percentile_range(xb: torch.Tensor, percent: float, symmetric: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block clipping range at a percentile (nearest rank, via kthvalue: no size limit)."""
    n = xb.shape[-1]
    k = min(n, max(1, math.ceil(round(percent * n / 100, 6))))  # round: 99.9 * 1000 / 100 is not 999.0
    if symmetric:
        a = xb.abs().kthvalue(k, dim=-1, keepdim=True).values
        return -a, a
    hi = xb.kthvalue(k, dim=-1, keepdim=True).values
    lo = xb.kthvalue(n - k + 1, dim=-1, keepdim=True).values
    return lo, hi


def mse_search(
    xb: torch.Tensor,
    lo: torch.Tensor,
    hi: torch.Tensor,
    qdq: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per block, the shrunk range (lo, hi) * r minimising the squared quantize-dequantize error.

    Vectorised over blocks; loops over the ratios only. The absmax range is tried first and only
    replaced on a strict improvement, so "mse" is never worse than "absmax".
    """
    best_lo, best_hi = lo, hi
    best = ((qdq(lo, hi) - xb) ** 2).sum(-1, keepdim=True)
    for r in MSE_RATIOS[1:]:
        cand_lo, cand_hi = lo * r, hi * r
        err = ((qdq(cand_lo, cand_hi) - xb) ** 2).sum(-1, keepdim=True)
        better = err < best
        best = torch.where(better, err, best)
        best_lo = torch.where(better, cand_lo, best_lo)
        best_hi = torch.where(better, cand_hi, best_hi)
    return best_lo, best_hi


class NumberFormat(ABC):
    """A number format: computes per-block scales, quantizes to codes, dequantizes back.

    Subclasses implement `scales_from_range`, `_encode` and `_decode` on float32 blocks; the public
    methods here handle layout, dtypes and clipping the same way for every format.
    """

    name: str
    bits: int
    fixed_block: int | None = None
    symmetric: bool = True

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    # --- to implement ------------------------------------------------------------------------
    @abstractmethod
    def scales_from_range(self, lo: torch.Tensor, hi: torch.Tensor) -> Scales:
        """Scales for blocks whose values lie in [lo, hi] (per-block tensors, shaped like Scales.scale)."""

    @abstractmethod
    def _encode(self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None) -> torch.Tensor:
        """Codes of float32 blocks (..., n_blocks, block)."""

    @abstractmethod
    def _decode(self, cb: torch.Tensor, scales: Scales) -> torch.Tensor:
        """Float32 values of code blocks (..., n_blocks, block)."""

    @abstractmethod
    def bits_per_element(self, block_size: int | None) -> float:
        """Storage bits per element including the scale overhead of one block."""

    # --- hooks -------------------------------------------------------------------------------
    def _block(self, x: torch.Tensor, block_size: int | None) -> int:
        if x.dim() == 0:
            raise ValueError(f"{self.name}: quantizes along the last dimension; got a 0-d tensor")
        if self.fixed_block is not None:
            if block_size not in (None, self.fixed_block):
                raise ValueError(
                    f"{self.name} uses fixed {self.fixed_block}-element blocks; block_size must be "
                    f"None or {self.fixed_block}, got {block_size!r}"
                )
            block_size = self.fixed_block
        return check_block_size(x.shape[-1], block_size)

    def _scales_for_range(self, lo: torch.Tensor, hi: torch.Tensor, xb: torch.Tensor) -> Scales:
        """Scales used by compute_scales; NVFP4 overrides it to keep the tensor-wide global scale."""
        return self.scales_from_range(lo, hi)

    def _scales_of_blocks(self, xb: torch.Tensor, clip: str) -> Scales:
        kind, percent = parse_clip(clip)
        if kind == "percentile":
            lo, hi = percentile_range(xb, percent, self.symmetric)
        else:
            lo, hi = xb.amin(-1, keepdim=True), xb.amax(-1, keepdim=True)
        if kind == "mse":
            lo, hi = mse_search(xb, lo, hi, lambda a, b: self._qdq(xb, self._scales_for_range(a, b, xb)))
        return self._scales_for_range(lo, hi, xb)

    def _qdq(
        self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        return self._decode(self._encode(xb, scales, generator), scales)

    # --- public API --------------------------------------------------------------------------
    def compute_scales(
        self, x: torch.Tensor, *, block_size: int | None = None, clip: str = "absmax"
    ) -> Scales:
        """Per-block scales of x (dynamic quantization), with optional clipping search."""
        return self._scales_of_blocks(to_blocks(x, self._block(x, block_size)), clip)

    def quantize(
        self,
        x: torch.Tensor,
        scales: Scales,
        *,
        block_size: int | None = None,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Codes of x, same shape as x (dtype depends on the format)."""
        xb = to_blocks(x, self._block(x, block_size))
        return self._encode(xb, scales, generator).reshape(x.shape)

    def dequantize(
        self,
        codes: torch.Tensor,
        scales: Scales,
        *,
        block_size: int | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> torch.Tensor:
        """Values of codes, same shape, in `dtype`."""
        block = self._block(codes, block_size)
        cb = codes.reshape(*codes.shape[:-1], codes.shape[-1] // block, block)
        return self._decode(cb, scales).reshape(codes.shape).to(dtype)

    def fake_quantize(
        self,
        x: torch.Tensor,
        *,
        block_size: int | None = None,
        scales: Scales | None = None,
        clip: str = "absmax",
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Quantize-dequantize in one call, computing in float32; returns x's dtype and shape.

        Given `scales` (static or unit) are used as they are; `clip` is then validated but unused.
        """
        xb = to_blocks(x, self._block(x, block_size))
        if scales is None:
            scales = self._scales_of_blocks(xb, clip)
        else:
            parse_clip(clip)
        return self._qdq(xb, scales, generator).reshape(x.shape).to(x.dtype)
