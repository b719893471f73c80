"""NF4 against a direct per-block reference and the QLoRA construction of its table; SR; torchao."""

from __future__ import annotations

import pytest
import torch

from qdrift.formats import Scales, get_format
from qdrift.formats.nf4 import NF4_LEVELS

from .refs import blocks_of, neighbours

NF4 = get_format("nf4")


def test_table_is_the_qlora_normal_map():
    """Rebuild the table as bitsandbytes' create_normal_map(offset=0.9677083) does, with ndtri for norm.ppf."""
    offset = 0.9677083
    pos = torch.special.ndtri(torch.linspace(offset, 0.5, 9)[:-1].double())
    neg = -torch.special.ndtri(torch.linspace(offset, 0.5, 8)[:-1].double())
    v = torch.cat([pos, torch.zeros(1, dtype=torch.double), neg]).sort().values
    v = v / v.max()
    table = torch.tensor(NF4_LEVELS, dtype=torch.double)
    assert len(NF4_LEVELS) == 16 and NF4_LEVELS[7] == 0.0 and NF4_LEVELS[0] == -1.0 and NF4_LEVELS[15] == 1.0
    assert (v - table).abs().max() < 1e-7


def _ref(x: torch.Tensor, block: int) -> tuple[list[int], list[float], list[float]]:
    """Plain loop: absmax per block, nearest table level by explicit search (ties to the lower level)."""
    levels = [float(torch.tensor(v, dtype=torch.float32)) for v in NF4_LEVELS]
    codes, values, scales = [], [], []
    for blk in blocks_of(x, block):
        amax = max(abs(v) for v in blk)
        scales.append(amax)
        for v in blk:
            u = float(torch.tensor(v, dtype=torch.float32) / amax) if amax > 0 else 0.0
            best = min(range(16), key=lambda i: (abs(u - levels[i]), i))
            codes.append(best)
            values.append(float(torch.tensor(levels[best], dtype=torch.float32) * torch.tensor(amax)))
    return codes, values, scales


@pytest.mark.parametrize("block", [None, 16, 64])
def test_matches_direct_reference(block):
    x = torch.randn(3, 128) * torch.tensor([[0.01], [1.0], [50.0]])
    x[0, :64] = 0.0
    s = NF4.compute_scales(x, block_size=block)
    codes = NF4.quantize(x, s, block_size=block)
    rc, rv, rs = _ref(x, block or 128)
    assert codes.dtype == torch.uint8 and codes.flatten().tolist() == rc
    assert s.scale[s.scale > 1e-30].flatten().tolist() == [v for v in rs if v > 0]
    assert NF4.dequantize(codes, s, block_size=block).flatten().tolist() == rv
    assert NF4.fake_quantize(x, block_size=block).flatten().tolist() == rv


def test_levels_are_fixed_points():
    x = torch.tensor([NF4_LEVELS]) * 3.0
    assert NF4.quantize(x, NF4.compute_scales(x)).tolist() == [list(range(16))]
    assert torch.equal(NF4.fake_quantize(x), x)


def test_stochastic_rounding():
    x = torch.rand(1, 40) * 2 - 1
    x[0, 0] = 1.0  # absmax 1: the scale is exactly 1
    s = Scales(scale=torch.ones(()))
    n = 4000
    draws = NF4.fake_quantize(x.expand(n, 40), scales=s, generator=torch.Generator().manual_seed(0))
    grid = [float(torch.tensor(v, dtype=torch.float32)) for v in NF4_LEVELS]
    for j, v in enumerate(x[0].tolist()):
        lo, hi = neighbours(v, grid)
        col = draws[:, j]
        assert ((col == lo) | (col == hi)).all()
        assert abs(col.mean().item() - v) <= 0.06 * (hi - lo) + 1e-7
    again = NF4.fake_quantize(x.expand(n, 40), scales=s, generator=torch.Generator().manual_seed(0))
    other = NF4.fake_quantize(x.expand(n, 40), scales=s, generator=torch.Generator().manual_seed(5))
    assert torch.equal(draws, again) and not torch.equal(draws, other)


def test_matches_torchao_nf4_codes():
    """torchao's NF4Tensor.convert_to_norm_float_weight (absmax per block, nearest level), given our exact table.

    torchao's own table is rounded to 4 decimals and its scalers are double-quantized, so only the
    code assignment is compared; torchao packs two codes per byte, the first in the high nibble.
    """
    nf4_mod = pytest.importorskip(
        "torchao.quantization.quantize_.workflows.nf4.nf4_tensor",
        reason="torchao (dev dependency) is needed for the peer comparison",
    )
    x = torch.randn(8, 256)
    table = torch.tensor(NF4_LEVELS, dtype=torch.float32)
    packed = nf4_mod.NF4Tensor.convert_to_norm_float_weight(x, x.numel() // 64, 64, table)
    ao_codes = torch.stack([packed >> 4, packed & 0xF], dim=-1).reshape(8, 256)
    ours = NF4.quantize(x, NF4.compute_scales(x, block_size=64), block_size=64)
    assert torch.equal(ours, ao_codes)
