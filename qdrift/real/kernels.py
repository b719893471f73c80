"""Matmul kernels for stored weights: dequantize-then-matmul everywhere, fused kernels where they exist.

Fused kernels carry their own numerics, and the backend name says so, since that is what a parity
report measures:
- int4 groups: tinygemm (`aten._weight_int4pack_mm`, CUDA, bfloat16; `_for_cpu` on CPU). It takes
  w = (q - 8) * scale + zero with scale and zero in the activation dtype, so on bfloat16 the scales
  are rounded to bfloat16 (the stored ones are float32). Same kernel torchao's
  Int4TilePackedTo4dTensor calls; called directly because that type builds its own qparams.
- int8 per channel, symmetric: `aten._weight_int8pack_mm` (CPU), scales in the activation dtype.
- fp8e4m3 per tensor or channel: `torch._scaled_mm` (CUDA, compute capability >= 8.9). It needs
  FP8 on both sides, so activations are cast to fp8e4m3 per token, which the spec (a16) does not
  say: serving engines do the same on Hopper, and this is one thing simulation misses.
Requests: "dequant" (always dequantize), "fused" (a fused kernel or an error saying why none),
"auto" (fused on CUDA when one applies, else dequantize; on CPU dequantize).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from qdrift.real.packing import PackedWeight, dequantize_weight, unpack_int4

KERNELS = ("auto", "dequant", "fused")
DEQUANT = "dequant-matmul"
TINYGEMM = "tinygemm-int4 (aten._weight_int4pack_mm)"
TINYGEMM_CPU = "tinygemm-int4 (aten._weight_int4pack_mm_for_cpu)"
INT8PACK = "int8pack-mm (aten._weight_int8pack_mm)"
SCALED_MM = "scaled-mm-fp8 (torch._scaled_mm; activations cast to fp8e4m3 per token)"
FP8_MIN_CAPABILITY = (8, 9)
TINYGEMM_GROUPS = (32, 64, 128, 256)

Matmul = Callable[[torch.Tensor], torch.Tensor]


def check_kernel(kernel: str) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"kernel: unknown kernel request {kernel!r}. Valid: {', '.join(KERNELS)}")


def _inner_k_tiles(k: int) -> int | None:
    return next((t for t in (8, 4, 2) if k % (t * 16) == 0), None)


def fused_problem(p: PackedWeight, device: torch.device, dtype: torch.dtype) -> tuple[str | None, str | None]:
    """(kernel name, None) when a fused kernel applies to this weight, device and dtype, else (None, why)."""
    s, (out, k) = p.scheme, p.shape
    if s.format == "int" and s.bits == 4:
        if s.granularity != "group" or s.group_size not in TINYGEMM_GROUPS:
            return None, f"tinygemm int4 needs groups of {TINYGEMM_GROUPS}, got '{s}'"
        if _inner_k_tiles(k) is None or out % 8:
            return None, f"tinygemm int4 needs in_features % 32 == 0 and out_features % 8 == 0, got [{out}, {k}]"
        if device.type == "cpu" and out % 16:  # torch's CPU packing op asks more than the CUDA one
            return None, f"tinygemm int4 on CPU needs out_features % 16 == 0, got [{out}, {k}]"
        if device.type == "cuda":
            if dtype != torch.bfloat16:
                return None, f"tinygemm int4 on CUDA takes bfloat16 activations, got {dtype}"
            return TINYGEMM, None
        if device.type == "cpu":
            return TINYGEMM_CPU, None
        return None, f"no int4 kernel for device type {device.type!r}"
    if s.format == "int" and s.bits == 8:
        if not s.symmetric or s.granularity != "channel":
            return None, f"int8pack-mm takes symmetric per-channel int8, got '{s}'"
        if device.type != "cpu":
            return None, f"int8pack-mm is used on CPU only, this is {device.type!r}"
        return INT8PACK, None
    if s.format == "fp8e4m3":
        if device.type != "cuda":
            return None, f"torch._scaled_mm needs CUDA, this is {device.type!r}"
        cap = torch.cuda.get_device_capability(device)
        if tuple(cap) < FP8_MIN_CAPABILITY:
            return None, f"torch._scaled_mm fp8 needs compute capability >= 8.9, this GPU has {cap[0]}.{cap[1]}"
        if s.granularity == "group":
            return None, "torch._scaled_mm takes per-tensor or per-channel fp8 weight scales, not groups"
        if k % 16 or out % 16:
            return None, f"torch._scaled_mm needs dims divisible by 16, got [{out}, {k}]"
        if dtype != torch.bfloat16:
            return None, f"torch._scaled_mm with row-wise scales outputs bfloat16, the model is {dtype}"
        return SCALED_MM, None
    return None, f"no fused kernel for '{s}'"


def choose(kernel: str, p: PackedWeight, device: torch.device, dtype: torch.dtype) -> tuple[str, str | None]:
    """The kernel to run and, for a dequant fallback under "auto" on CUDA, why no fused one applied."""
    check_kernel(kernel)
    if kernel == "dequant":
        return DEQUANT, None
    name, why = fused_problem(p, device, dtype)
    if kernel == "fused":
        if name is None:
            raise ValueError(f"kernel='fused': {why}. Use kernel='dequant' or 'auto'")
        return name, None
    if device.type == "cuda" and name is not None:
        return name, None
    return DEQUANT, why if device.type == "cuda" else None


def prepare(name: str, p: PackedWeight, dtype: torch.dtype) -> Matmul:
    """A function x -> x @ W^T for kernel `name`, with the weight laid out for that kernel once."""
    if name == DEQUANT:
        return lambda x: F.linear(x, dequantize_weight(p, x.dtype))
    if name in (TINYGEMM, TINYGEMM_CPU):
        return _tinygemm(p, dtype, cpu=name == TINYGEMM_CPU)
    if name == INT8PACK:
        scale = p.scale.reshape(-1).to(dtype)
        return lambda x: torch.ops.aten._weight_int8pack_mm(x.reshape(-1, x.shape[-1]), p.data, scale).reshape(
            *x.shape[:-1], -1)
    if name == SCALED_MM:
        return _scaled_mm(p)
    raise ValueError(f"unknown kernel {name!r}")


def _tinygemm(p: PackedWeight, dtype: torch.dtype, cpu: bool) -> Matmul:
    out, k = p.shape
    group = p.scheme.group_size
    unsigned = unpack_int4(p.data)  # 0..15; symmetric codes are stored + 8
    scale = p.scale.float()
    # tinygemm: w = (u - 8) * scale + zero. Symmetric: u - 8 is the code, zero 0.
    # Asymmetric: (u - zp) * scale = (u - 8) * scale + (8 - zp) * scale.
    zero = torch.zeros_like(scale) if p.zero_point is None else (8 - p.zero_point.float()) * scale
    scales_zeros = torch.stack([scale.t(), zero.t()], dim=-1).to(dtype).contiguous()  # [groups, out, 2]
    tiles = _inner_k_tiles(k)
    if cpu:
        weight = torch.ops.aten._convert_weight_to_int4pack_for_cpu(unsigned.to(torch.int32).contiguous(), tiles)
        op = torch.ops.aten._weight_int4pack_mm_for_cpu
    else:
        high_first = (unsigned[:, 0::2] << 4 | unsigned[:, 1::2]).to(torch.uint8).contiguous()
        weight = torch.ops.aten._convert_weight_to_int4pack(high_first, tiles)
        op = torch.ops.aten._weight_int4pack_mm

    def matmul(x: torch.Tensor) -> torch.Tensor:
        y = op(x.reshape(-1, k).contiguous(), weight, group, scales_zeros)
        return y.reshape(*x.shape[:-1], out)

    return matmul


def _scaled_mm(p: PackedWeight) -> Matmul:
    out, k = p.shape
    fmax = torch.finfo(torch.float8_e4m3fn).max
    w_t = p.data.t()  # [k, out], column-major as _scaled_mm wants
    scale_w = p.scale.float().reshape(-1, 1).expand(out, 1).reshape(1, out).contiguous()

    def matmul(x: torch.Tensor) -> torch.Tensor:
        x2 = x.reshape(-1, k)
        scale_x = (x2.abs().amax(-1, keepdim=True).float() / fmax).clamp_min(torch.finfo(torch.float32).tiny)
        xq = (x2.float() / scale_x).clamp(-fmax, fmax).to(torch.float8_e4m3fn)
        y = torch._scaled_mm(xq, w_t, scale_a=scale_x, scale_b=scale_w, out_dtype=x.dtype)
        return y.reshape(*x.shape[:-1], out)

    return matmul
