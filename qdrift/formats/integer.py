"""Integer formats: symmetric `int2`..`int8` and asymmetric (zero-point) `uint2`..`uint8`.

Symmetric uses the narrow range [-qmax, qmax], qmax = 2^(b-1) - 1, with scale absmax / qmax: the
grid is exactly symmetric, so the extra negative code of two's complement never biases the error.
That is qdrift's convention, not every stack's: compressed-tensors (llm-compressor checkpoints as
vLLM serves them) and GPTQ use the full range [-2^(b-1), 2^(b-1) - 1] with scale absmax / (qmax + 1/2),
whose int4 error on Gaussian weights in groups of 128 is about 11% lower (relative MSE 0.01226 against
0.01375 here). So symmetric intN results are slightly pessimistic against such checkpoints; a
checkpoint qdrift saves serves exactly qdrift's grid (its codes fit the full range).

Asymmetric maps [min(lo, 0), max(hi, 0)] onto [0, 2^b - 1] with an integer zero point, so zero stays
exactly representable (padding, ReLU).
Codes are int8 (symmetric) or uint8 (asymmetric) whatever b is; packing is left to storage.
"""

from __future__ import annotations

import torch

from qdrift.formats.base import TINY, NumberFormat, Scales, round_int, safe_div, scale_of

MIN_BITS, MAX_BITS = 2, 8
SCALE_BITS = 16  # fp16 scales, as stored by GPTQ/AWQ checkpoints


class IntFormat(NumberFormat):
    """b-bit integer format, symmetric (narrow range) or asymmetric with a zero point."""

    def __init__(self, bits: int, symmetric: bool = True):
        name = f"{'int' if symmetric else 'uint'}{bits}"
        if not isinstance(bits, int) or not MIN_BITS <= bits <= MAX_BITS:
            raise ValueError(
                f"{name}: integer formats support bits in the range {MIN_BITS}..{MAX_BITS}, got {bits!r}"
            )
        self.name = name
        self.bits = bits
        self.symmetric = symmetric
        self.qmax = 2 ** (bits - 1) - 1 if symmetric else 2**bits - 1
        self.qmin = -self.qmax if symmetric else 0

    def scales_from_range(self, lo: torch.Tensor, hi: torch.Tensor) -> Scales:
        lo, hi = lo.float(), hi.float()
        if self.symmetric:
            amax = torch.maximum(lo.abs(), hi.abs())
            return Scales(scale=(amax / self.qmax).clamp_min(TINY))
        lo, hi = lo.clamp(max=0.0), hi.clamp(min=0.0)
        scale = ((hi - lo) / self.qmax).clamp_min(TINY)
        zero_point = torch.round(-lo / scale).clamp(0, self.qmax)
        return Scales(scale=scale, zero_point=zero_point)

    def _zero_point(self, scales: Scales, like: torch.Tensor) -> torch.Tensor | None:
        if self.symmetric:
            return None
        if scales.zero_point is None:
            raise ValueError(f"{self.name} is asymmetric: its Scales need a zero_point")
        return scales.zero_point.to(device=like.device, dtype=torch.float32)

    def _encode(self, xb: torch.Tensor, scales: Scales, generator: torch.Generator | None) -> torch.Tensor:
        q = round_int(safe_div(xb, scale_of(scales, xb)), generator)
        zp = self._zero_point(scales, xb)
        if zp is not None:
            q = q + zp
        q = q.clamp(self.qmin, self.qmax)
        return q.to(torch.int8 if self.symmetric else torch.uint8)

    def _decode(self, cb: torch.Tensor, scales: Scales) -> torch.Tensor:
        q = cb.float()
        zp = self._zero_point(scales, q)
        if zp is not None:
            q = q - zp
        return q * scale_of(scales, q)

    def bits_per_element(self, block_size: int | None) -> float:
        """b bits plus an fp16 scale (and a b-bit zero point, as GPTQ/AWQ pack them) per block.

        block_size=None (one block per row or tensor) amortises the scales to ~0.
        """
        if block_size is None:
            return float(self.bits)
        per_block = SCALE_BITS + (0 if self.symmetric else self.bits)
        return self.bits + per_block / block_size
