"""Real weight storage: integer codes packed two per byte (INT4) or one (INT8), FP8 as float8_e4m3fn.

Codes and scales come from the same number-format functions the fake path uses (qdrift.formats,
through the same per-tensor seeded generator), so a stored weight dequantizes to exactly the
fake-quantized weight. qdrift's conventions are kept as they are: float32 scales, symmetric
integers on the narrow range [-qmax, qmax], asymmetric integers as unsigned codes with an
integer zero point in [0, 2^b - 1].

Why not torchao's tensor types: its CPU int4 type (IntxUnpackedToInt8Tensor) stores one code per
byte; its packed int4 types (Int4Tensor, Int4TilePackedTo4dTensor) need CUDA, bfloat16 and compute
their own qparams with a floating-point zero point; its `from_hp` quantizes as x * (1 / scale),
which rounds differently from the fake path's x / scale at ties. None stores the spec's numbers
exactly, so the storage is written here and torchao/torch kernels are fed from it (kernels.py).

The INT4 byte layout (element 2j in the low nibble of byte j, 2j+1 in the high nibble, codes offset
to unsigned) is the little-endian byte view of compressed-tensors' int32 `pack_to_int32`, so a
checkpoint is a reinterpretation, not a repack.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from qdrift.formats import Scales
from qdrift.quant.schemes import make_generator, number_format
from qdrift.spec import TensorScheme

# (format, bits) pairs that have a storage format here.
STORABLE = {("int", 4), ("int", 8), ("fp8e4m3", 8)}
STORABLE_TEXT = "int4 and int8 (symmetric, or with zero point 'z'), fp8e4m3; per tensor, channel or group"
GRANULARITIES = ("tensor", "channel", "group")


def storage_problem(scheme: TensorScheme) -> str | None:
    """Why `scheme` has no real storage format, or None when it has one."""
    if (scheme.format, scheme.bits) not in STORABLE:
        return f"weights '{scheme}' ({scheme.number_format}) have no packed storage format here"
    if scheme.granularity not in GRANULARITIES:
        return f"weights '{scheme}': granularity {scheme.granularity!r} has no storage format here"
    return None


@dataclass
class PackedWeight:
    """One weight [out, in] in real storage.

    data: uint8 [out, in/2] (int4: two codes a byte), int8 [out, in] (symmetric int8), uint8
    [out, in] (asymmetric int8) or float8_e4m3fn [out, in].
    scale: float32 [out, n_groups] ([1, 1] per tensor). zero_point: uint8, same shape, or None.
    """

    scheme: TensorScheme
    shape: tuple[int, int]
    data: torch.Tensor
    scale: torch.Tensor
    zero_point: torch.Tensor | None

    @property
    def group_size(self) -> int:
        """Elements per scale along a row (the whole row per channel; the whole tensor per tensor)."""
        out, inp = self.shape
        if self.scheme.granularity == "tensor":
            return out * inp
        return inp // self.scale.shape[-1]

    def nbytes(self) -> int:
        """Bytes of storage: codes, scales and zero points."""
        zp = 0 if self.zero_point is None else self.zero_point.numel() * self.zero_point.element_size()
        return self.data.numel() * self.data.element_size() + self.scale.numel() * 4 + zp


def pack_int4(codes: torch.Tensor) -> torch.Tensor:
    """Unsigned 4-bit codes (uint8 0..15, even last dim) to bytes: element 2j low nibble, 2j+1 high."""
    if codes.shape[-1] % 2:
        raise ValueError(f"int4 packing needs an even last dimension, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def unpack_int4(packed: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_int4: uint8 codes 0..15 with twice the last dimension."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).reshape(*packed.shape[:-1], -1)


def _block(scheme: TensorScheme, weight: torch.Tensor) -> torch.Tensor:
    """The layout the fake path quantizes: [1, out*in] per tensor, [out, in] otherwise."""
    return weight.reshape(1, -1) if scheme.granularity == "tensor" else weight


def _block_size(scheme: TensorScheme) -> int | None:
    return scheme.group_size if scheme.granularity == "group" else None


def pack_weight(weight: torch.Tensor, scheme: TensorScheme, salt: str) -> PackedWeight:
    """Quantize a weight [out, in] (input dim last) into real storage, exactly as the fake path does.

    salt: the name the fake path seeds stochastic rounding with ('<module>.weight').
    """
    problem = storage_problem(scheme)
    if problem:
        raise ValueError(f"{problem}. Stored: {STORABLE_TEXT}")
    if weight.dim() != 2:
        raise ValueError(f"pack_weight takes a 2-D weight [out, in], got shape {tuple(weight.shape)}")
    fmt = number_format(scheme)
    x = _block(scheme, weight)
    block = _block_size(scheme)
    scales = fmt.compute_scales(x, block_size=block, clip=scheme.clip)
    gen = make_generator(scheme, salt, weight.device)
    codes = fmt.quantize(x, scales, block_size=block, generator=gen).reshape(weight.shape)
    n_groups = 1 if scheme.granularity != "group" else weight.shape[1] // scheme.group_size
    rows = 1 if scheme.granularity == "tensor" else weight.shape[0]
    scale = scales.scale.float().reshape(rows, n_groups).contiguous()
    zp = None if scales.zero_point is None else scales.zero_point.reshape(rows, n_groups).to(torch.uint8)
    if scheme.format == "int" and scheme.bits == 4:
        unsigned = codes.to(torch.int16) + (8 if scheme.symmetric else 0)
        data = pack_int4(unsigned.to(torch.uint8))
    else:
        data = codes.contiguous()
    return PackedWeight(scheme, tuple(weight.shape), data, scale, zp)


def codes_of(packed: PackedWeight) -> torch.Tensor:
    """The codes as the number format holds them (int8 symmetric, uint8 asymmetric, float8 fp8)."""
    s = packed.scheme
    if s.format == "int" and s.bits == 4:
        unsigned = unpack_int4(packed.data)
        return (unsigned.to(torch.int16) - 8).to(torch.int8) if s.symmetric else unsigned
    return packed.data


def dequantize_weight(packed: PackedWeight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The weight [out, in] the stored codes mean, in `dtype` (float32 math, as the fake path)."""
    s = packed.scheme
    codes = _block(s, codes_of(packed))
    zp = None if packed.zero_point is None else packed.zero_point.float().unsqueeze(-1)
    scales = Scales(scale=packed.scale.unsqueeze(-1), zero_point=zp)
    w = number_format(s).dequantize(codes, scales, block_size=_block_size(s))
    return w.reshape(packed.shape).to(dtype)
