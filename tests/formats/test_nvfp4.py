"""NVFP4 against a direct per-block reference of NVIDIA's recipe, and torchao's nvfp4_quantize."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from qdrift.formats import Scales, get_format

from .refs import E2M1, blocks_of, e2m1_code_ref, e2m1_value, fp8_round_ref, neighbours, signed_grid

NV = get_format("nvfp4")
f32 = np.float32


def ref_nvfp4(x: torch.Tensor) -> tuple[float, list[float], list[int], list[float]]:
    """Plain loop, float32 arithmetic as in Model Optimizer's NVFP4QTensor:

    global = amax / (6 * 448); block = fp8(clamp(amax_b / (6 * global), 2^-9, 448)) (1.0 for a zero
    block); element = e2m1(x / (block * global)); value = e2m1 * (block * global).
    """
    amax = f32(max(abs(v) for v in x.flatten().tolist()))
    g = amax / f32(6.0 * 448.0) if amax > 0 else f32(1.0)
    scales, codes, deq = [], [], []
    for blk in blocks_of(x, 16):
        s = f32(max(abs(v) for v in blk)) / (f32(6.0) * g)
        s = f32(1.0) if s == 0 else min(max(s, f32(2.0**-9)), f32(448.0))
        s = f32(fp8_round_ref(float(s), "e4m3fn"))
        scales.append(float(s))
        eff = s * g
        for v in blk:
            code = e2m1_code_ref(float(f32(v) / eff))
            codes.append(code)
            deq.append(float(f32(e2m1_value(code)) * eff))
    return float(g), scales, codes, deq


def _data() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 128, generator=g) * torch.logspace(-2, 2, 8).repeat_interleave(16)
    x[0, :16] = 0.0  # zero block
    x[1, 16:32] = 1e-7 * torch.randn(16, generator=g)  # tiny block: the 2^-9 floor of the block scale
    x[2, :16] = torch.tensor(E2M1 + [-v for v in E2M1]) * 0.37
    return x


def test_matches_direct_reference():
    x = _data()
    s = NV.compute_scales(x)
    g, scales, codes, deq = ref_nvfp4(x)
    assert s.scale.shape == (4, 8, 1) and s.global_scale.shape == ()
    assert s.global_scale.item() == g and s.global_scale.item() == float(f32(x.abs().max()) / f32(2688.0))
    assert s.scale.flatten().tolist() == scales
    q = NV.quantize(x, s)
    assert q.dtype == torch.uint8 and q.flatten().tolist() == codes
    assert NV.dequantize(q, s).flatten().tolist() == deq
    assert NV.fake_quantize(x).flatten().tolist() == deq
    # block scales are FP8 E4M3 values; the largest block uses the top of the FP8 range
    assert torch.equal(s.scale.to(torch.float8_e4m3fn).float(), s.scale) and s.scale.max().item() == 448.0


def test_zero_tensor_and_saturation():
    assert torch.equal(NV.fake_quantize(torch.zeros(2, 32)), torch.zeros(2, 32))
    s = Scales(scale=torch.ones(()), global_scale=torch.tensor(1.0))
    x = torch.tensor([[7.0, -100.0, 5.0, 2.5, 0.25, 0.75] + [0.0] * 10])
    assert NV.fake_quantize(x, scales=s)[0, :6].tolist() == [6.0, -6.0, 4.0, 2.0, 0.0, 1.0]


def test_static_scales_from_range():
    """Calibrated ranges give the same scales as dynamic quantization of data spanning them."""
    x = _data()[1:]
    xb = x.reshape(3, 8, 16)
    s = NV.scales_from_range(xb.amin(-1, keepdim=True), xb.amax(-1, keepdim=True))
    d = NV.compute_scales(x)
    assert torch.equal(s.scale, d.scale) and torch.equal(s.global_scale, d.global_scale)


def test_stochastic_rounding():
    x = torch.randn(1, 32) * 2
    s = Scales(scale=torch.ones(()), global_scale=torch.tensor(1.0))
    grid = signed_grid(E2M1)
    n = 4000
    draws = NV.fake_quantize(x.expand(n, 32), scales=s, generator=torch.Generator().manual_seed(0))
    for j, v in enumerate(x[0].tolist()):
        lo, hi = neighbours(max(min(v, 6.0), -6.0), grid)
        col = draws[:, j]
        assert ((col == lo) | (col == hi)).all()
        assert abs(col.mean().item() - v) <= 0.06 * (hi - lo) + 1e-7
    again = NV.fake_quantize(x.expand(n, 32), scales=s, generator=torch.Generator().manual_seed(0))
    other = NV.fake_quantize(x.expand(n, 32), scales=s, generator=torch.Generator().manual_seed(3))
    assert torch.equal(draws, again) and not torch.equal(draws, other)


def test_matches_torchao_nvfp4():
    """torchao's nvfp4_quantize with a per-tensor scale: same global scale, block scales and codes.

    torchao computes (amax / 6) / global for the block scale and multiplies by (1 / global) / block
    for the elements, where Model Optimizer (and we) divide once; a one-ulp difference can move a
    value sitting on a rounding boundary, so a few codes may differ by one step, never more.
    """
    nv = pytest.importorskip(
        "torchao.prototype.mx_formats.nvfp4_tensor",
        reason="torchao (dev dependency) is needed for the peer comparison",
    )
    from torchao.prototype.mx_formats.kernels import unpack_uint4

    g = torch.Generator().manual_seed(2)
    x = torch.randn(32, 256, generator=g) * torch.logspace(-1, 1, 32).reshape(32, 1)
    gs = nv.per_tensor_amax_to_scale(x.abs().amax())
    ao_scales, packed = nv.nvfp4_quantize(x, 16, gs)
    s = NV.compute_scales(x)
    assert torch.equal(s.global_scale, gs)
    same_scale = ao_scales.float().reshape(s.scale.shape) == s.scale
    assert same_scale.float().mean() > 0.999
    ours, theirs = NV.quantize(x, s), unpack_uint4(packed)
    mag = lambda c: (c & 7).int()  # noqa: E731
    close = ((mag(ours) - mag(theirs)).abs() <= 1) & ((ours >> 3) == (theirs >> 3)) | (ours == theirs)
    assert close.all()
    rows_same = same_scale.repeat_interleave(16, -2).reshape(32, 256)
    assert (ours[rows_same] == theirs[rows_same]).float().mean() > 0.999
    t = nv.NVFP4Tensor.to_nvfp4(x, per_tensor_scale=gs)
    torch.testing.assert_close(
        t.dequantize(torch.float32), NV.fake_quantize(x), rtol=0, atol=float(2 * s.scale.max() * gs)
    )
    assert (t.dequantize(torch.float32) == NV.fake_quantize(x)).float().mean() > 0.999


def test_dynamic_activations_take_a_global_scale_per_token_so_the_batch_does_not_matter():
    # Each token against the direct reference of the recipe applied to that token alone; a tensor-wide
    # global scale made one sequence's numerics depend on an outlier in another sequence of its batch.
    from qdrift.quant.schemes import ActivationQuantizer
    from qdrift.spec import TensorScheme

    q = ActivationQuantizer(TensorScheme.parse("nvfp4", "activations"), "x", torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    seq_a, seq_b = torch.randn(1, 4, 64, generator=g), torch.randn(1, 4, 64, generator=g)
    seq_b[0, 0, 0] = 900.0  # a massive activation in the other sequence
    alone, batched = q(seq_a), q(torch.cat([seq_a, seq_b]))
    assert torch.equal(batched[:1], alone)
    for t in range(4):
        assert alone[0, t].tolist() == ref_nvfp4(seq_a[0, t])[3]
