"""Bind a spec's `TensorScheme` to a number format and to the layout of one kind of tensor.

The number formats quantize along the last dimension in blocks; this module is the one place
that knows how weights, activations, keys and values are laid out, and so which blocks mean
"per channel", "per group", "per token", "per head" or "per tensor" for each of them.
"""

from __future__ import annotations

import hashlib

import torch

from qdrift.formats import NumberFormat, Scales, get_format
from qdrift.formats.nvfp4 import NVFP4Format
from qdrift.spec import TensorScheme


def number_format(scheme: TensorScheme) -> NumberFormat:
    return get_format(scheme.number_format)


def make_generator(scheme: TensorScheme, salt: str, device: torch.device) -> torch.Generator | None:
    """A generator for stochastic rounding, seeded from the spec seed and a stable per-tensor salt."""
    if scheme.seed is None:
        return None
    return torch.Generator(device=device).manual_seed(rounding_seed(scheme, salt))


def rounding_seed(scheme: TensorScheme, salt: str) -> int:
    """The seed of one tensor's stochastic rounding: the spec's seed and a stable hash of the tensor's name."""
    # A stable hash (python's hash() is salted per process) keeps runs reproducible; a cryptographic one
    # because names differ late and alike ("model.layers.12..." / "model.layers.21..."), which the bytes'
    # sum could not tell apart, so those tensors drew the same rounding decisions.
    offset = int.from_bytes(hashlib.sha256(salt.encode()).digest()[:8], "little")
    return (scheme.seed * 1_000_003 + offset) % (2**63)


def _block(scheme: TensorScheme) -> int | None:
    return scheme.group_size if scheme.granularity in ("group", "block") else None


def check_divides(scheme: TensorScheme, dim: int, where: str) -> None:
    """Raise a clear error when a group/block size does not divide the dimension it splits."""
    block = _block(scheme)
    if block is None or dim % block == 0:
        return
    divisors = [d for d in (16, 32, 64, 128, 256) if dim % d == 0]
    kind = "block size of the format" if scheme.granularity == "block" else "group size"
    raise ValueError(
        f"{where}: {kind} {block} does not divide its dimension {dim}; "
        f"valid group sizes for this dimension include {divisors or 'none of 16..256'} "
        f"(or use per-channel granularity)"
    )


def quantize_weight(weight: torch.Tensor, scheme: TensorScheme, salt: str) -> torch.Tensor:
    """Fake-quantize a weight laid out [..., out, in] (input dimension last), once.

    Leading dims (fused MoE experts) are independent matrices, quantized one by one, so that
    per-tensor scales and NVFP4's global scale are per expert, as serving engines store them.
    """
    if weight.dim() > 2:
        return torch.stack([quantize_weight(w, scheme, f"{salt}[{i}]") for i, w in enumerate(weight)])
    fmt = number_format(scheme)
    gen = make_generator(scheme, salt, weight.device)
    if scheme.granularity == "tensor":
        flat = weight.reshape(1, -1)
        out = fmt.fake_quantize(flat, clip=scheme.clip, generator=gen)
        return out.reshape(weight.shape)
    return fmt.fake_quantize(weight, block_size=_block(scheme), clip=scheme.clip, generator=gen)


def weight_bits(scheme: TensorScheme | None, dtype: torch.dtype) -> float:
    """Storage bits per weight element, scales included."""
    if scheme is None:
        return float(torch.finfo(dtype).bits)
    fmt = number_format(scheme)
    if scheme.granularity in ("group", "block"):
        return fmt.bits_per_element(scheme.group_size)
    return float(fmt.bits)


class ActivationQuantizer:
    """Quantizes the input of one Linear: dynamic per token/group/block, or a calibrated static scale."""

    def __init__(self, scheme: TensorScheme, name: str, device: torch.device):
        self.scheme = scheme
        self.name = name
        self.fmt = number_format(scheme)
        self.generator = make_generator(scheme, name, device)
        self.scales: Scales | None = None  # static only, set by calibration

    @property
    def needs_calibration(self) -> bool:
        return self.scheme.source == "static"

    def reseed(self) -> None:
        """Restart the stochastic-rounding stream from its seed (`qdrift.quant.reseed_rounding`)."""
        if self.generator is not None:
            self.generator.manual_seed(rounding_seed(self.scheme, self.name))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.scheme.source == "static":
            if self.scales is None:
                raise RuntimeError(
                    f"activations of '{self.name}' use static scales ({self.scheme}) but none were "
                    "calibrated: pass calibration=... to qdrift.quantize"
                )
            return self.fmt.fake_quantize(x, scales=self.scales, generator=self.generator)
        if isinstance(self.fmt, NVFP4Format):  # a global scale per token, so batch-mates do not enter it
            return self.fmt.fake_quantize(x, scales=self.fmt.token_scales(x), generator=self.generator)
        return self.fmt.fake_quantize(x, block_size=_block(self.scheme), generator=self.generator)
