"""FP8: bit-exact against torch's float8 casts and against a pure-Python FP8 grid; saturation; SR; torchao."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import torch

from qdrift.formats import Scales, get_format

from .refs import fp8_decode, fp8_magnitudes, fp8_round_ref, neighbours, signed_grid

KINDS = {"fp8e4m3": (torch.float8_e4m3fn, "e4m3fn", 448.0), "fp8e5m2": (torch.float8_e5m2, "e5m2", 57344.0)}
UNIT = Scales(scale=torch.ones(()))


def _edge_values(kind: str) -> torch.Tensor:
    """Subnormals, ties between them, max, just above max, overflow, +-inf, NaN, +-0, random."""
    mags = fp8_magnitudes(kind)
    fmax, tiny = mags[-1], mags[1]
    vals = [
        0.0,
        -0.0,
        tiny,
        -tiny,
        tiny / 2,
        tiny * 0.5000001,
        tiny / 4,
        tiny * 1.5,
        tiny * 2.5,
        mags[8],
        -mags[8],
    ]
    vals += [
        fmax,
        -fmax,
        fmax * 1.01,
        fmax * 1.1,
        -fmax * 1.5,
        1e30,
        -1e30,
        math.inf,
        -math.inf,
        math.nan,
        -math.nan,
    ]
    vals += [(a + b) / 2 for a, b in pairwise(mags)]  # every tie between neighbours
    g = torch.Generator().manual_seed(0)
    rand = torch.randn(2000, generator=g) * torch.logspace(-8, 6, 2000).clamp(max=fmax * 2)
    return torch.cat([torch.tensor(vals, dtype=torch.float32), rand])


@pytest.mark.parametrize("name", list(KINDS))
def test_bit_exact_with_saturating_torch_cast(name):
    dtype, _, fmax = KINDS[name]
    fmt = get_format(name)
    x = _edge_values(KINDS[name][1]).reshape(1, -1)
    codes = fmt.quantize(x, UNIT)
    assert codes.dtype == dtype
    ref = x.clamp(-fmax, fmax).to(dtype)
    assert torch.equal(codes.view(torch.uint8), ref.view(torch.uint8))  # includes NaN bit patterns
    y = fmt.fake_quantize(x, scales=UNIT)
    assert torch.equal(torch.isnan(y), torch.isnan(x)) and torch.isnan(x).sum() == 2  # NaN stays NaN
    assert (y.abs()[~torch.isnan(y)] <= fmax).all()  # overflow saturates
    assert (y[x == math.inf] == fmax).all() and (y[x == -math.inf] == -fmax).all()
    assert (y[x.abs() > fmax * 1.001].abs() == fmax).all()


@pytest.mark.parametrize("name", list(KINDS))
def test_matches_python_grid(name):
    """Nearest-even rounding and saturation against a grid decoded from the bit layout by formula."""
    _, kind, fmax = KINDS[name]
    fmt = get_format(name)
    x = _edge_values(kind)
    y = fmt.fake_quantize(x.reshape(1, -1), scales=UNIT)[0]
    for v, got in zip(x.tolist(), y.tolist(), strict=True):
        want = fp8_round_ref(v, kind)
        if math.isnan(want):
            assert math.isnan(got)
        else:
            assert got == want and math.copysign(1, got) == math.copysign(1, want), (v, got, want)
    assert fp8_magnitudes(kind)[-1] == fmax


@pytest.mark.parametrize("name", list(KINDS))
def test_decode_every_code(name):
    dtype, kind, _ = KINDS[name]
    codes = torch.arange(256, dtype=torch.uint8).view(dtype).reshape(1, -1)
    got = get_format(name).dequantize(codes, UNIT)[0].tolist()
    for c, v in enumerate(got):
        want = fp8_decode(c, kind)
        assert (math.isnan(v) and math.isnan(want)) or v == want


@pytest.mark.parametrize("name", list(KINDS))
@pytest.mark.parametrize("block", [None, 16])
def test_block_scales(name, block):
    """Scale = amax / max per block, computed by a plain loop; codes bit-exact with the scaled cast."""
    dtype, _, fmax = KINDS[name]
    fmt = get_format(name)
    x = torch.randn(3, 64) * torch.tensor([[1e-4], [1.0], [300.0]])
    b = block or 64
    s = fmt.compute_scales(x, block_size=block)
    rows = x.tolist()
    want = [max(abs(v) for v in row[i : i + b]) for row in rows for i in range(0, 64, b)]
    want = torch.tensor(want, dtype=torch.float32) / fmax
    assert torch.equal(s.scale.flatten(), want)
    scale = s.scale.repeat_interleave(b, -1).reshape(3, 64)
    ref = (x / scale).clamp(-fmax, fmax).to(dtype)
    assert torch.equal(fmt.quantize(x, s, block_size=block).view(torch.uint8), ref.view(torch.uint8))
    assert torch.equal(fmt.fake_quantize(x, block_size=block), ref.float() * scale)
    torch.testing.assert_close(
        fmt.fake_quantize(x, block_size=block).abs().amax(-1), x.abs().amax(-1), rtol=1e-6, atol=0
    )


def test_bf16_and_fp16_inputs():
    fmt = get_format("fp8e4m3")
    x = torch.randn(4, 32)
    for dtype in (torch.bfloat16, torch.float16):
        xi = x.to(dtype)
        y = fmt.fake_quantize(xi, scales=UNIT)
        assert y.dtype == dtype
        assert torch.equal(y, xi.float().to(torch.float8_e4m3fn).float().to(dtype))


@pytest.mark.parametrize("name", list(KINDS))
def test_stochastic_rounding(name):
    dtype, kind, fmax = KINDS[name]
    fmt = get_format(name)
    grid = signed_grid(fp8_magnitudes(kind))
    x = torch.randn(1, 48) * 3
    x[0, :6] = torch.tensor([0.0, -0.0, fmax, -fmax, grid[-2], fp8_magnitudes(kind)[1] / 3])
    n = 3000
    draws = fmt.fake_quantize(x.expand(n, 48), scales=UNIT, generator=torch.Generator().manual_seed(0))
    for j, v in enumerate(x[0].tolist()):
        lo, hi = neighbours(v, grid)
        col = draws[:, j]
        assert ((col == lo) | (col == hi)).all(), (v, lo, hi)
        assert abs(col.mean().item() - v) <= 0.07 * (hi - lo) + 1e-30  # unbiased
    assert torch.equal(draws[:, :5], x[:, :5].expand(n, 5))  # representable values never move
    again = fmt.fake_quantize(x.expand(n, 48), scales=UNIT, generator=torch.Generator().manual_seed(0))
    other = fmt.fake_quantize(x.expand(n, 48), scales=UNIT, generator=torch.Generator().manual_seed(1))
    assert torch.equal(draws, again) and not torch.equal(draws, other)
    special = torch.tensor([[math.inf, -math.inf, fmax * 3, math.nan, -1e-30]])
    out = fmt.fake_quantize(special, scales=UNIT, generator=torch.Generator().manual_seed(0))[0]
    assert out[:3].tolist() == [fmax, -fmax, fmax] and math.isnan(out[3])  # saturation, NaN kept
    assert out[4].item() in (0.0, -fp8_magnitudes(kind)[1])  # -0.0 or the smallest negative subnormal
    assert math.copysign(1, out[4].item()) == -1  # the sign survives rounding to zero


# --- torchao's float8 primitives --------------------------------------------------------------


@pytest.mark.parametrize("name", list(KINDS))
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_matches_torchao_float8(name, granularity):
    qp = pytest.importorskip(
        "torchao.quantization.quant_primitives",
        reason="torchao (dev dependency) is needed for the peer comparison",
    )
    dtype = KINDS[name][0]
    fmt = get_format(name)
    x = torch.randn(8, 64) * 10
    block = list(x.shape) if granularity == "tensor" else [1, 64]
    ao_scale = qp._choose_scale_float8(x, block, dtype)
    ao_codes = qp._quantize_affine_float8(x, ao_scale, dtype)
    ao_deq = qp._dequantize_affine_float8(ao_codes, ao_scale)
    xin = x.reshape(1, -1) if granularity == "tensor" else x
    s = fmt.compute_scales(xin)
    assert torch.equal(s.scale.reshape(ao_scale.shape), ao_scale)
    codes = fmt.quantize(xin, s).reshape(x.shape)
    assert torch.equal(codes.view(torch.uint8), ao_codes.view(torch.uint8))
    assert torch.equal(fmt.fake_quantize(xin).reshape(x.shape), ao_deq)
