"""Registry, layout contract, error messages, zero blocks and clipping, for every format."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from qdrift.formats import IntFormat, Scales, available_formats, get_format
from qdrift.formats.base import MSE_RATIOS

ALL = [
    "int2", "int3", "int4", "int5", "int6", "int7", "int8",
    "uint2", "uint3", "uint4", "uint5", "uint6", "uint7", "uint8",
    "fp8e4m3", "fp8e5m2", "nf4", "mxfp4", "mxfp8", "nvfp4",
]  # fmt: skip
FREE_BLOCK = [n for n in ALL if get_format(n).fixed_block is None]
FIXED = {"mxfp4": 32, "mxfp8": 32, "nvfp4": 16}


def _block(name: str, default: int = 32) -> int:
    return FIXED.get(name, default)


def test_registry_lists_every_format():
    assert available_formats() == ALL
    for name in ALL:
        fmt = get_format(name)
        assert fmt.name == name and get_format(name) is fmt
        assert fmt.bits == (
            int(name[-1]) if "int" in name else {"nf4": 4, "mxfp4": 4, "nvfp4": 4}.get(name, 8)
        )
        assert fmt.fixed_block == FIXED.get(name)


def test_unknown_format_message_suggests_and_lists():
    with pytest.raises(ValueError) as e:
        get_format("nvfp5")
    msg = str(e.value)
    assert "Unknown number format 'nvfp5'" in msg and "Did you mean 'nvfp4'?" in msg
    assert msg.endswith("Available: " + ", ".join(ALL))
    with pytest.raises(ValueError, match=r"Unknown number format 'zzz'\. Available: int2"):
        get_format("zzz")


@pytest.mark.parametrize("name", ["int1", "int9", "uint0", "uint16"])
def test_bits_out_of_range(name):
    with pytest.raises(ValueError, match=r"bits in the range 2\.\.8"):
        get_format(name)


@pytest.mark.parametrize("bits", [1, 9, 0])
def test_int_format_constructor_range(bits):
    with pytest.raises(ValueError, match=rf"bits in the range 2\.\.8, got {bits}"):
        IntFormat(bits)


@pytest.mark.parametrize("name", FREE_BLOCK)
def test_non_dividing_block_size(name):
    fmt, x = get_format(name), torch.randn(2, 24)
    for call in (
        lambda: fmt.fake_quantize(x, block_size=16),
        lambda: fmt.compute_scales(x, block_size=16),
        lambda: fmt.quantize(x, Scales(torch.ones(())), block_size=16),
    ):
        with pytest.raises(ValueError) as e:
            call()
        msg = str(e.value)
        assert "block_size 16" in msg and "last dimension 24" in msg
        assert "[1, 2, 3, 4, 6, 8, 12, 24]" in msg
    with pytest.raises(ValueError, match="block_size 0"):
        fmt.fake_quantize(x, block_size=0)


@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_block_formats_reject_other_sizes(name):
    fmt, n = get_format(name), FIXED[name]
    with pytest.raises(ValueError, match=rf"fixed {n}-element blocks; block_size must be None or {n}, got 8"):
        fmt.fake_quantize(torch.randn(2, 64), block_size=8)
    assert fmt.fake_quantize(torch.randn(2, 64), block_size=n).shape == (2, 64)
    with pytest.raises(ValueError, match=rf"last dimension {n + 8}; valid block sizes"):
        fmt.fake_quantize(torch.randn(2, n + 8))


@pytest.mark.parametrize("clip", ["max", "p0", "p101", "p", "99.9", "mse2", ""])
def test_bad_clip(clip):
    for name in ("int4", "nvfp4"):
        with pytest.raises(ValueError) as e:
            get_format(name).fake_quantize(torch.randn(2, 32), clip=clip)
        msg = str(e.value)
        assert msg.startswith("clip must be one of 'absmax', 'mse', 'p<percent>'") and repr(clip) in msg


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_layout_dtype_and_zero_blocks(name, dtype):
    """Scale shape, output dtype/shape, and all-zero blocks -> exact zeros (never NaN), every clip."""
    fmt, b = get_format(name), _block(name)
    x = torch.randn(2, 3, 4 * b).to(dtype)
    x[0, 1, :b] = 0  # one zero block
    x[1] = 0  # a whole zero row
    for clip in ("absmax", "mse", "p90"):
        s = fmt.compute_scales(x, block_size=b, clip=clip)
        assert s.scale.shape == (2, 3, 4, 1) and s.scale.dtype == torch.float32
        y = fmt.fake_quantize(x, block_size=b, clip=clip)
        assert y.dtype == dtype and y.shape == x.shape and torch.isfinite(y).all()
        assert (y[0, 1, :b] == 0).all() and (y[1] == 0).all()
        codes = fmt.quantize(x, s, block_size=b)
        assert codes.shape == x.shape
        deq = fmt.dequantize(codes, s, block_size=b, dtype=dtype)
        assert deq.dtype == dtype and torch.equal(deq, fmt.fake_quantize(x, block_size=b, scales=s))
    zeros = torch.zeros(3, 2 * b, dtype=dtype)
    assert torch.equal(fmt.fake_quantize(zeros), zeros) and torch.equal(
        fmt.fake_quantize(zeros, clip="mse"), zeros
    )


@pytest.mark.parametrize("name", ALL)
def test_given_scales_broadcast(name):
    """A 0-d scale (per-tensor or unit) acts like the same scale expanded to one per block."""
    fmt, b = get_format(name), _block(name)
    x = torch.randn(3, 2 * b) * 3
    # not a power of two: float formats are invariant under power-of-two rescaling
    unit = Scales(scale=torch.tensor(0.37), zero_point=None if fmt.symmetric else torch.tensor(3.0))
    full = Scales(
        scale=torch.full((3, 2, 1), 0.37), zero_point=None if fmt.symmetric else torch.full((3, 2, 1), 3.0)
    )
    got = fmt.fake_quantize(x, block_size=b, scales=unit)
    assert torch.equal(got, fmt.fake_quantize(x, block_size=b, scales=full))
    assert not torch.equal(got, fmt.fake_quantize(x, block_size=b))  # the given scale was used
    if fmt.fixed_block is None:  # per-tensor: one block for the flattened tensor
        s = fmt.compute_scales(x.reshape(1, -1))
        flat = Scales(
            scale=s.scale.reshape(()), zero_point=None if s.zero_point is None else s.zero_point.reshape(())
        )
        assert torch.equal(
            fmt.fake_quantize(x, scales=flat), fmt.fake_quantize(x.reshape(1, -1)).reshape(x.shape)
        )


@pytest.mark.parametrize("name", ALL)
def test_scales_from_range(name):
    """Static scales from per-block ranges equal the dynamic ones; symmetric formats use max(|lo|, |hi|)."""
    fmt, b = get_format(name), _block(name)
    x = torch.randn(4, 4 * b)
    xb = x.reshape(4, 4, b)
    lo, hi = xb.amin(-1, keepdim=True), xb.amax(-1, keepdim=True)
    s = fmt.scales_from_range(lo, hi)
    assert torch.equal(fmt.fake_quantize(x, block_size=b, scales=s), fmt.fake_quantize(x, block_size=b))
    if fmt.symmetric:
        a = torch.maximum(lo.abs(), hi.abs())
        assert torch.equal(fmt.scales_from_range(-a, a).scale, s.scale)
        assert torch.equal(fmt.scales_from_range(torch.zeros_like(a), a).scale, s.scale)


def test_bits_per_element():
    assert get_format("int4").bits_per_element(128) == 4 + 16 / 128
    assert get_format("uint4").bits_per_element(128) == 4 + (16 + 4) / 128
    assert get_format("int8").bits_per_element(None) == 8
    assert get_format("fp8e4m3").bits_per_element(128) == 8 + 32 / 128
    assert get_format("nf4").bits_per_element(64) == 4.5
    assert get_format("mxfp4").bits_per_element(32) == 4 + 8 / 32
    assert get_format("mxfp8").bits_per_element(None) == 8 + 8 / 32
    assert get_format("nvfp4").bits_per_element(16) == 4 + 8 / 16


def _heavy_tailed(shape, seed=0):
    """Normal / sqrt(uniform): heavy tails like outlier-laden activations."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) / torch.rand(shape, generator=g).clamp_min(1e-3).sqrt()


@pytest.mark.parametrize("name", ALL)
def test_mse_clip_never_worse_than_absmax(name):
    fmt, b = get_format(name), _block(name, 64)
    x = _heavy_tailed((16, 4 * b))
    err = {
        c: ((fmt.fake_quantize(x, block_size=b, clip=c) - x) ** 2).reshape(16, 4, b).sum(-1)
        for c in ("absmax", "mse")
    }
    assert (err["mse"] <= err["absmax"]).all()  # per block
    if name in ("int3", "int4", "uint4", "nf4", "fp8e5m2"):
        assert err["mse"].sum() < 0.95 * err["absmax"].sum()


def test_mse_search_matches_brute_force_per_block():
    """int4 mse clipping = the best ratio of an explicit per-block loop over the same ratio grid."""
    x = _heavy_tailed((6, 64), seed=3)
    got = get_format("int4").fake_quantize(x, block_size=32, clip="mse").numpy()
    xs = x.numpy().astype(np.float32)
    for r in range(6):
        for j in range(2):
            blk = xs[r, 32 * j : 32 * (j + 1)]
            best = None
            for ratio in MSE_RATIOS:
                scale = max(
                    np.float32(np.abs(blk).max() * np.float32(ratio)) / np.float32(7), np.float32(1.2e-38)
                )
                deq = np.clip(np.round(blk / np.float32(scale)), -7, 7) * np.float32(scale)
                err = float(((deq - blk) ** 2).sum())
                if best is None or err < best:
                    best = err
            assert math.isclose(float(((got[r, 32 * j : 32 * (j + 1)] - blk) ** 2).sum()), best, rel_tol=1e-5)


@pytest.mark.parametrize("name", ["int8", "uint8", "fp8e4m3", "nf4"])
def test_percentile_clip_clamps_outliers(name):
    fmt = get_format(name)
    x = torch.linspace(-1, 1, 1000).reshape(1, 1000)
    x[0, 500] = 100.0  # one outlier
    y = fmt.fake_quantize(x, clip="p99")
    absmax = fmt.fake_quantize(x)
    # nearest-rank 99th percentile of |x| (990th smallest of 1000), computed independently
    ref = sorted(abs(v) for v in x[0].tolist())[989] if fmt.symmetric else sorted(x[0].tolist())[989]
    assert y[0, 500] <= ref * 1.01 + 1e-6 and abs(y[0, 500]) < 2
    inliers = torch.ones(1000, dtype=torch.bool)
    inliers[500] = False
    if name != "fp8e4m3":  # FP8's relative precision barely depends on the scale
        assert ((y - x)[0, inliers] ** 2).mean() < 0.1 * ((absmax - x)[0, inliers] ** 2).mean()
    assert torch.equal(fmt.fake_quantize(x, clip="p100"), absmax)


def test_percentile_is_nearest_rank():
    x = torch.arange(1, 1001, dtype=torch.float32).reshape(1, 1000)  # |x| = 1..1000
    s = get_format("fp8e4m3").compute_scales(x, clip="p99.9")
    assert s.scale.item() == torch.tensor(999.0) / 448  # the 999th smallest, not the 1000th
    u = get_format("uint8").compute_scales(x - 500.5, clip="p99")
    assert u.scale.item() == torch.tensor((489.5 + 489.5) / 255).item()  # ranks 11 and 990 of 1000


def test_formats_never_import_transformers():
    code = "import sys, qdrift.formats; assert 'transformers' not in sys.modules, 'transformers imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
