"""MXFP4 / MXFP8 against a direct per-block reference of the OCP MX v1.0 rules, and torchao's to_mx."""

from __future__ import annotations

import math

import pytest
import torch

from qdrift.formats import Scales, get_format

from .refs import (
    E2M1,
    blocks_of,
    e2m1_code_ref,
    e2m1_value,
    fp8_magnitudes,
    fp8_round_ref,
    neighbours,
    signed_grid,
)

EMAX = {"mxfp4": 2, "mxfp8": 8}


def ref_exponent(amax: float, emax: int) -> int:
    """Shared exponent, OCP MX v1.0 section 6.3: floor(log2(amax)) - emax_elem, clamped to E8M0's range."""
    if amax == 0:
        return -127
    return max(-127, min(127, math.floor(math.log2(amax)) - emax))


def ref_mx(x: torch.Tensor, name: str) -> tuple[list[int], list, list[float]]:
    """Plain loop over 32-element blocks: (exponents, element codes or values, dequantized values)."""
    exps, elems, deq = [], [], []
    for blk in blocks_of(x, 32):
        e = ref_exponent(max(abs(v) for v in blk), EMAX[name])
        exps.append(e)
        for v in blk:
            u = v / 2.0**e  # exact: a power-of-two scale
            if name == "mxfp4":
                code = e2m1_code_ref(u)
                elems.append(code)
                deq.append(e2m1_value(code) * 2.0**e)
            else:
                q = fp8_round_ref(u, "e4m3fn")
                elems.append(q)
                deq.append(q * 2.0**e)
    return exps, elems, deq


def _exponents(s: Scales) -> list[int]:
    mant, exp = torch.frexp(s.scale.flatten())
    assert (mant == 0.5).all()  # powers of two only
    return (exp - 1).tolist()


def _data() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8 * 32, generator=g) * torch.logspace(-30, 30, 8).repeat_interleave(32)
    x[0, :32] = 0.0  # zero block
    x[1, 32:64] = 1e-39 * torch.randn(32, generator=g)  # subnormal block: exponent clamps to -127
    x[2, 64:96] = torch.linspace(-4, 4, 32)  # amax exactly a power of two
    x[2, 96:128] = torch.linspace(-1, 1, 32) * 7.0
    x[2, 127] = torch.nextafter(
        torch.tensor(8.0), torch.tensor(0.0)
    )  # amax just below a power of two (float32)
    x[3, :32] = torch.tensor(
        E2M1 + [-v for v in E2M1] + [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 2 + [5.5, 7.0]
    )
    x[3, 32:64] = 3e38 * torch.linspace(-1, 1, 32)  # huge block
    return x


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8"])
def test_matches_direct_reference(name):
    fmt = get_format(name)
    x = _data()
    s = fmt.compute_scales(x)
    assert s.scale.shape == (4, 8, 1)
    exps, elems, deq = ref_mx(x, name)
    assert _exponents(s) == exps
    codes = fmt.quantize(x, s)
    if name == "mxfp4":
        assert codes.dtype == torch.uint8 and codes.flatten().tolist() == elems
    else:
        assert codes.dtype == torch.float8_e4m3fn and codes.float().flatten().tolist() == elems
    assert fmt.dequantize(codes, s).flatten().tolist() == deq
    assert fmt.fake_quantize(x).flatten().tolist() == deq


def test_e8m0_exponents():
    fmt = get_format("mxfp4")
    x = torch.zeros(6, 32)
    x[1, 0] = 4.0  # 2^2 -> exponent 0
    x[2, 0] = torch.nextafter(torch.tensor(4.0), torch.tensor(0.0))  # floor(log2) = 1 -> exponent -1
    x[3, 0] = 6.0
    x[4, 0] = 1e-38
    x[5, 0] = 3.4e38
    assert _exponents(fmt.compute_scales(x)) == [-127, 0, -1, 0, -127, 125]
    assert _exponents(get_format("mxfp8").compute_scales(x)) == [-127, -6, -7, -6, -127, 119]


def test_spec_saturation():
    """The floor rule lets a block's largest values exceed the element range: they saturate."""
    x = torch.zeros(2, 32)
    x[0, :3] = torch.tensor([7.9, -7.0, 5.0])  # X = 2^(2 - 2) = 1: 7.9 -> 6, -7 -> -6, 5 -> 4 (tie to even)
    x[1, :2] = torch.tensor([500.0, -480.0])  # MXFP8: X = 2^(8 - 8) = 1: saturate to +-448
    y4 = get_format("mxfp4").fake_quantize(x)
    assert y4[0, :3].tolist() == [6.0, -6.0, 4.0]
    y8 = get_format("mxfp8").fake_quantize(x)
    assert y8[1, :2].tolist() == [448.0, -448.0]


def test_codes_layout():
    """MXFP4 codes are sign << 3 | magnitude index; -0.0 and small negatives keep the sign (code 8)."""
    x = torch.tensor([E2M1 + [-v for v in E2M1] + [-0.0, -0.1] + [0.0] * 14]) * 1.0
    x[0, 30] = 4.0  # amax 6 (from E2M1) -> scale 1
    codes = get_format("mxfp4").quantize(x, Scales(scale=torch.ones(())))
    assert codes[0, :18].tolist() == list(range(8)) + [8 + i for i in range(8)] + [8, 8]


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8"])
def test_stochastic_rounding(name):
    fmt = get_format(name)
    x = torch.randn(1, 32) * 2
    unit = Scales(scale=torch.ones(()))
    grid = signed_grid(E2M1 if name == "mxfp4" else fp8_magnitudes("e4m3fn"))
    n = 4000
    draws = fmt.fake_quantize(x.expand(n, 32), scales=unit, generator=torch.Generator().manual_seed(0))
    for j, v in enumerate(x[0].tolist()):
        lo, hi = neighbours(max(min(v, grid[-1]), grid[0]), grid)
        col = draws[:, j]
        assert ((col == lo) | (col == hi)).all()
        assert abs(col.mean().item() - v) <= 0.06 * (hi - lo) + 1e-7
    again = fmt.fake_quantize(x.expand(n, 32), scales=unit, generator=torch.Generator().manual_seed(0))
    other = fmt.fake_quantize(x.expand(n, 32), scales=unit, generator=torch.Generator().manual_seed(2))
    assert torch.equal(draws, again) and not torch.equal(draws, other)


# --- torchao.prototype.mx_formats --------------------------------------------------------------


@pytest.mark.parametrize("name", ["mxfp4", "mxfp8"])
def test_matches_torchao_to_mx(name):
    """torchao's to_mx with the spec's FLOOR scale mode: same E8M0 exponents, element codes and values.

    Blocks are kept away from amax < 2^-124, where torchao divides by 2^-126 instead of the E8M0 scale.
    """
    mx = pytest.importorskip(
        "torchao.prototype.mx_formats.mx_tensor",
        reason="torchao (dev dependency) is needed for the peer comparison",
    )
    from torchao.prototype.mx_formats.kernels import unpack_uint4

    elem = torch.float4_e2m1fn_x2 if name == "mxfp4" else torch.float8_e4m3fn
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 256, generator=g) * torch.logspace(-6, 6, 16).reshape(16, 1)
    x[0, :32] = 0.0
    fmt = get_format(name)
    scale_e8m0, data = mx.to_mx(x, elem, 32, mx.ScaleCalculationMode.FLOOR)
    s = fmt.compute_scales(x)
    ours = fmt.quantize(x, s)
    assert (scale_e8m0.view(torch.uint8).int() - 127).flatten().tolist() == _exponents(s)
    if name == "mxfp4":
        assert torch.equal(unpack_uint4(data), ours)
    else:
        assert torch.equal(data.view(torch.uint8), ours.view(torch.uint8))
    ao_deq = mx.to_dtype(data, scale_e8m0, elem, 32, torch.float32)
    assert torch.equal(ao_deq, fmt.fake_quantize(x))
