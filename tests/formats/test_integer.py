"""Integer formats against a direct per-block numpy reference, and against torchao's affine primitives."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch

from qdrift.formats import Scales, get_format

TINY = np.float32(np.finfo(np.float32).tiny)


def ref_int(x: np.ndarray, bits: int, block: int | None, symmetric: bool):
    """Plain loop over rows and blocks, in float32 arithmetic: (codes, dequantized, scales, zero points)."""
    x = x.astype(np.float32).reshape(-1, x.shape[-1])
    block = block or x.shape[-1]
    codes, deq = np.zeros_like(x), np.zeros_like(x)
    scales, zps = [], []
    for r in range(x.shape[0]):
        for start in range(0, x.shape[1], block):
            blk = x[r, start : start + block]
            if symmetric:
                qmax = np.float32(2 ** (bits - 1) - 1)
                scale = max(np.float32(np.abs(blk).max()) / qmax, TINY)
                zp = np.float32(0)
                q = np.clip(np.round(blk / scale), -qmax, qmax)  # np.round: half to even
            else:
                qmax = np.float32(2**bits - 1)
                lo, hi = min(np.float32(blk.min()), np.float32(0)), max(np.float32(blk.max()), np.float32(0))
                scale = max((hi - lo) / qmax, TINY)
                zp = np.clip(np.round(-lo / scale), 0, qmax)
                q = np.clip(np.round(blk / scale) + zp, 0, qmax)
            codes[r, start : start + block] = q
            deq[r, start : start + block] = (q - zp) * scale
            scales.append(scale)
            zps.append(zp)
    return codes, deq, np.array(scales, np.float32), np.array(zps, np.float32)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
@pytest.mark.parametrize("block", [None, 8, 32])
def test_matches_direct_reference(symmetric, bits, block):
    fmt = get_format(("int" if symmetric else "uint") + str(bits))
    x = torch.randn(2, 3, 64) * torch.logspace(-3, 2, 3).reshape(1, 3, 1)
    x[0, 0, :8] = 0.0  # a zero block (for block 8)
    if not symmetric:
        x[1] += 0.7  # off-centre data, where the zero point matters
    s = fmt.compute_scales(x, block_size=block)
    codes = fmt.quantize(x, s, block_size=block)
    assert codes.dtype == (torch.int8 if symmetric else torch.uint8)
    rc, rd, rs, rz = ref_int(x.numpy(), bits, block, symmetric)
    np.testing.assert_array_equal(s.scale.flatten().numpy(), rs)
    if not symmetric:
        np.testing.assert_array_equal(s.zero_point.flatten().numpy(), rz)
    np.testing.assert_array_equal(codes.reshape(-1, 64).numpy().astype(np.float32), rc)
    np.testing.assert_array_equal(fmt.dequantize(codes, s, block_size=block).reshape(-1, 64).numpy(), rd)
    np.testing.assert_array_equal(fmt.fake_quantize(x, block_size=block).reshape(-1, 64).numpy(), rd)


def test_narrow_range_and_codes():
    x = torch.tensor([[-7.0, -3.5, 0.0, 2.5, 0.5, 7.0]])  # scale 1
    codes = get_format("int4").quantize(x, get_format("int4").compute_scales(x))
    assert codes.tolist() == [[-7, -4, 0, 2, 0, 7]]  # half to even
    u = get_format("uint2")
    s = u.compute_scales(torch.tensor([[-1.0, 2.0]]))
    assert s.scale.item() == 1.0 and s.zero_point.item() == 1.0
    assert u.quantize(torch.tensor([[-1.0, 0.0, 2.0, 9.0, -9.0]]), s).tolist() == [[0, 1, 3, 3, 0]]


@pytest.mark.parametrize("symmetric", [True, False])
def test_error_decreases_with_bits(symmetric):
    x = torch.randn(16, 256)
    errs = [
        (
            (get_format(("int" if symmetric else "uint") + str(b)).fake_quantize(x, block_size=64) - x) ** 2
        ).mean()
        for b in range(2, 9)
    ]
    assert all(a > 1.5 * b for a, b in pairwise(errs))


def test_all_zero_block_gives_zeros():
    x = torch.zeros(2, 64)
    x[1, 32:] = torch.randn(32)
    for name in ("int4", "uint4"):
        fmt = get_format(name)
        s = fmt.compute_scales(x, block_size=32)
        y = fmt.fake_quantize(x, block_size=32)
        assert torch.isfinite(s.scale).all() and (y[0] == 0).all() and (y[1, :32] == 0).all()
        if name == "uint4":
            assert (fmt.quantize(x, s, block_size=32)[0] == s.zero_point[0]).all()


@pytest.mark.parametrize("name", ["int4", "uint3"])
def test_stochastic_rounding(name):
    fmt = get_format(name)
    x = torch.rand(1, 64) * 2 - 1
    # a grid covering x, so that no draw saturates: step 0.4, zero point 3 -> [-1.2, 1.6] for uint3
    s = (
        fmt.compute_scales(x)
        if fmt.symmetric
        else Scales(scale=torch.tensor(0.4), zero_point=torch.tensor(3.0))
    )
    zp = 0.0 if s.zero_point is None else s.zero_point.item()
    n = 4000
    draws = fmt.fake_quantize(x.expand(n, 64), scales=s, generator=torch.Generator().manual_seed(0))
    scale = s.scale.reshape(())
    v = x / scale + zp
    lower, upper = (torch.floor(v) - zp) * scale, (torch.floor(v) + 1 - zp) * scale
    assert ((draws == lower) | (draws == upper)).all()  # always one of the two neighbours
    assert ((draws.mean(0) - x[0]).abs() < 0.06 * scale).all()  # unbiased (7 sigma)
    assert (draws != draws[0]).any(0).float().mean() > 0.9  # really random
    again = fmt.fake_quantize(x.expand(n, 64), scales=s, generator=torch.Generator().manual_seed(0))
    other = fmt.fake_quantize(x.expand(n, 64), scales=s, generator=torch.Generator().manual_seed(1))
    assert torch.equal(draws, again) and not torch.equal(draws, other)


# --- torchao's affine quantization primitives -------------------------------------------------


def _ao():
    return pytest.importorskip(
        "torchao.quantization.quant_primitives",
        reason="torchao (dev dependency) is needed for the peer comparison",
    )


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits", [3, 4, 8])
def test_matches_torchao_affine(symmetric, bits):
    """Same scales as torchao's choose_qparams_affine (narrow range), same codes and fake-quant values.

    torchao multiplies by 1/scale where we divide by scale; where those differ by one ulp a value
    sitting on a rounding boundary can land one code apart, so such codes are allowed only there.
    """
    qp = _ao()
    fmt = get_format(("int" if symmetric else "uint") + str(bits))
    qmin, qmax = (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1) if symmetric else (0, 2**bits - 1)
    dtype = torch.int8 if symmetric else torch.uint8
    x = torch.randn(8, 128)
    block = (1, 32)
    mapping = qp.MappingType.SYMMETRIC if symmetric else qp.MappingType.ASYMMETRIC
    ao_scale, ao_zp = qp.choose_qparams_affine(
        x, mapping, block, dtype, qmin, qmax, zero_point_dtype=torch.int32
    )
    s = fmt.compute_scales(x, block_size=32)
    torch.testing.assert_close(s.scale.reshape(8, 4), ao_scale, rtol=0, atol=0)
    zp = ao_zp  # torchao's symmetric zero point is a zero tensor
    if not symmetric:
        assert torch.equal(s.zero_point.reshape(8, 4), ao_zp.float())
    ao_codes = qp.quantize_affine(x, block, ao_scale, zp, dtype, qmin, qmax)
    ours = fmt.quantize(x, s, block_size=32)
    diff = ours.int() - ao_codes.int()
    v = (x.reshape(8, 4, 32) / s.scale).reshape(8, 128)
    on_boundary = (v - v.floor() - 0.5).abs() < 1e-5
    assert (diff.abs() <= 1).all() and (diff[~on_boundary] == 0).all()
    assert (diff != 0).float().mean() < 1e-3
    ao_fq = qp._fake_quantize_affine(x, block, ao_scale, zp, dtype, qmin, qmax)
    ao_dq = qp.dequantize_affine(ours, block, ao_scale, zp, dtype, qmin, qmax)
    ours_fq = fmt.fake_quantize(x, block_size=32)
    assert torch.equal(ours_fq, ao_dq)  # same codes -> identical dequantization
    assert ((ours_fq - ao_fq).abs() <= s.scale.repeat_interleave(32, -1).reshape(8, 128) * 1.0001).all()
    assert (ours_fq != ao_fq).float().mean() < 1e-3


def test_torchao_dequantizes_given_scales():
    """Static (calibrated) scales: our dequantize agrees with torchao's for the same codes and scales."""
    qp = _ao()
    fmt = get_format("uint4")
    x = torch.randn(4, 64) + 0.5
    s = fmt.scales_from_range(torch.full((4, 1, 1), -1.0), torch.full((4, 1, 1), 2.5))
    codes = fmt.quantize(x, s)
    ao = qp.dequantize_affine(
        codes, (1, 64), s.scale.reshape(4, 1), s.zero_point.reshape(4, 1).int(), torch.uint8, 0, 15
    )
    assert torch.equal(fmt.dequantize(codes, s), ao)
    top = (15 - s.zero_point) * s.scale  # the representable range, shifted by the rounded zero point
    assert (fmt.fake_quantize(x * 10, scales=s).amax(-1) == top.reshape(4)).all()
