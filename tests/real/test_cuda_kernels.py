"""Fused CUDA kernels (tinygemm int4, torch._scaled_mm fp8) against references computed here.

These need a CUDA device and are skipped without one. Each kernel is checked against a direct
float32 computation of what it is documented to compute, from the stored codes: a wrong nibble
order or scale layout gives errors of order 1, rounding gives < 1e-2.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import qdrift
from qdrift.real import path_of, quantize_real
from qdrift.real.convert import weight_scheme
from qdrift.real.kernels import SCALED_MM, TINYGEMM, prepare
from qdrift.real.packing import codes_of, pack_weight
from qdrift.real.parity import parity
from qdrift.spec import QuantSpec
from qdrift.tiny import tiny_model

from .conftest import prompt

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.float() - ref).norm() / ref.norm())


def _weight_and_input(out=256, k=512, tokens=24):
    g = torch.Generator().manual_seed(0)
    w = torch.randn(out, k, generator=g) * 0.05
    x = torch.randn(tokens, k, generator=g)
    return w, x


@pytest.mark.parametrize("spec", ["w4g128-a16-kv:16", "w4g128z-a16-kv:16", "w4g32-a16-kv:16"])
def test_tinygemm_cuda_matches_the_codes_it_was_given(spec):
    w, x = _weight_and_input()
    packed = pack_weight(w, weight_scheme(QuantSpec.parse(spec)), "w")
    group = packed.scheme.group_size
    # Reference: (code - zero_point) * scale per group, scales and zeros rounded to bfloat16 as
    # tinygemm takes them, float32 matmul.
    codes = codes_of(packed).float()
    zp = 0.0 if packed.zero_point is None else packed.zero_point.float().repeat_interleave(group, dim=1)
    scale = packed.scale.to(torch.bfloat16).float().repeat_interleave(group, dim=1)
    ref = F.linear(x.to(torch.bfloat16).float(), (codes - zp) * scale)
    cuda = copy.deepcopy(packed)
    cuda.data, cuda.scale = packed.data.cuda(), packed.scale.cuda()
    cuda.zero_point = None if packed.zero_point is None else packed.zero_point.cuda()
    y = prepare(TINYGEMM, cuda, torch.bfloat16)(x.to("cuda", torch.bfloat16)).cpu()
    assert _rel(y, ref) < 1e-2, f"{spec}: relative error {_rel(y, ref):.3g}"


@pytest.mark.skipif(not HOPPER, reason="torch._scaled_mm fp8 needs compute capability >= 8.9")
def test_scaled_mm_fp8_matches_per_token_fp8_activations_times_fp8_weights():
    w, x = _weight_and_input()
    packed = pack_weight(w, weight_scheme(QuantSpec.parse("wfp8e4m3-a16-kv:16")), "w")
    fmax = torch.finfo(torch.float8_e4m3fn).max
    xb = x.to(torch.bfloat16).float()
    sx = xb.abs().amax(-1, keepdim=True) / fmax
    xq = (xb / sx).to(torch.float8_e4m3fn).float() * sx  # torch's own fp8 cast, per token
    ref = F.linear(xq, packed.data.float() * packed.scale.float())
    cuda = copy.deepcopy(packed)
    cuda.data, cuda.scale = packed.data.cuda(), packed.scale.cuda()
    y = prepare(SCALED_MM, cuda, torch.bfloat16)(x.to("cuda", torch.bfloat16)).cpu()
    assert _rel(y, ref) < 1e-2, f"relative error {_rel(y, ref):.3g}"
    # The activation cast is what the spec (a16) does not say: without it the error is larger.
    ref_a16 = F.linear(xb, packed.data.float() * packed.scale.float())
    assert _rel(y, ref) < _rel(y, ref_a16)


@pytest.mark.parametrize("spec, backend", [("w4g128-a16-kv:16", "tinygemm-int4"),
                                           pytest.param("wfp8e4m3-a16-kv:16", "scaled-mm-fp8", marks=pytest.mark.skipif(
                                               not HOPPER, reason="fp8 needs compute capability >= 8.9"))])
def test_auto_picks_the_fused_kernel_on_cuda_and_parity_is_reported(spec, backend):
    model = tiny_model("llama", dtype=torch.bfloat16).cuda()
    report = parity(model, spec, prompt().cuda(), kernel="auto")
    assert report.real.backend.startswith(backend)
    assert report.real.device.startswith("cuda:0 (") and "sm" in report.real.device
    assert all(0 < r.rel < 0.1 for r in report.layers), [(r.name, r.rel) for r in report.layers]
    assert report.max_logit_error < 0.5 and report.kl_mean < 1e-2
    print(report.render(top=3))


def test_float32_on_cuda_falls_back_to_dequant_and_says_why():
    model = quantize_real(tiny_model("llama").cuda(), "w4g128-a16-kv:16", kernel="auto")
    with torch.no_grad():
        model(prompt().cuda())
    assert path_of(model).backend == "dequant-matmul"
    reasons = {m.fallback_reason for m in model.modules() if hasattr(m, "fallback_reason")}
    assert any(r and "bfloat16" in r for r in reasons), reasons


def test_quantize_path_real_runs_fused_kernels_and_generates_with_cache():
    base = tiny_model("llama", dtype=torch.bfloat16).cuda()
    real = qdrift.quantize(copy.deepcopy(base), "w4g128-a16-kv:16", path="real")
    fake = qdrift.quantize(base, "w4g128-a16-kv:16")
    ids = prompt(batch=1).cuda()
    with torch.no_grad():
        err = (real(ids).logits.float() - fake(ids).logits.float()).abs().max()
        out = real.generate(ids, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert path_of(real).backend.startswith("tinygemm-int4")
    assert err < 0.1, f"max |dlogit| {err:.3g}"  # bfloat16 scales in tinygemm, as on the CPU
    assert out.shape == (1, ids.shape[1] + 8)
