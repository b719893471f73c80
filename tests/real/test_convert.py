"""Real and fake paths of one spec: same logits (exactly on the dequant-matmul path)."""

import copy

import pytest
import torch

import qdrift
from qdrift.real import RealQuantLinear, path_of, quantize_real, set_kernel
from qdrift.tiny import architectures, tiny_model

from .conftest import prompt

MOE = {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "glm4_moe"}
SPECS = ["w8-a16-kv:16", "w4g128-a16-kv:16", "w4g128z-a16-kv:16", "wfp8e4m3-a16-kv:16"]


def _pair(arch, spec, kernel="auto", dtype=torch.float32):
    model = tiny_model(arch, dtype=dtype)
    real = quantize_real(copy.deepcopy(model), spec, kernel=kernel)
    fake = qdrift.quantize(model, spec)
    with torch.no_grad():
        return fake(prompt()).logits.float(), real(prompt()).logits.float(), real


# Tolerance: 0. On the dequant-matmul path both sides run the same float32 decode of the same codes
# and the same matmul, so any difference is a bug in storage, not rounding.
@pytest.mark.parametrize("arch", architectures())
@pytest.mark.parametrize("spec", SPECS)
def test_real_dequant_path_gives_the_fake_paths_logits_exactly(arch, spec):
    if arch in MOE:
        spec += "-skip:*.experts"
    fake, real, model = _pair(arch, spec)
    assert torch.equal(fake, real), f"{arch} {spec}: max |dlogit| {(fake - real).abs().max():.3g}"
    assert path_of(model).backend == "dequant-matmul"


# Fused CPU kernels: float32 scales and accumulation give rounding-level error (< 1e-4 on logits of
# magnitude ~1); bfloat16 rounds tinygemm's scales to bfloat16, so only a loose bound (0.1) holds.
@pytest.mark.parametrize("spec, backend", [("w4g32-a16-kv:16", "tinygemm"), ("w4g128z-a16-kv:16", "tinygemm"),
                                           ("w8-a16-kv:16", "int8pack")])
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-4), (torch.bfloat16, 0.1)])
def test_fused_cpu_kernels_agree_with_the_fake_path_within_tolerance(spec, backend, dtype, tol):
    fake, real, model = _pair("llama", spec, kernel="fused", dtype=dtype)
    err = float((fake - real).abs().max())
    assert err < tol, f"{spec} {dtype}: max |dlogit| {err:.3g}"
    assert path_of(model).backend.startswith(backend)


def test_real_model_generates_with_cache_like_the_fake_one():
    model = tiny_model("llama")
    real = quantize_real(copy.deepcopy(model), "w4g32-a16-kv:16")
    qdrift.quantize(model, "w4g32-a16-kv:16")
    with torch.no_grad():
        a = model.generate(prompt(), max_new_tokens=8, do_sample=False)
        b = real.generate(prompt(), max_new_tokens=8, do_sample=False)
    assert torch.equal(a, b)


def test_selected_modules_are_replaced_and_the_head_is_kept():
    model = quantize_real(tiny_model("llama"), "w4g32-a16-kv:16-skip:*.o_proj")
    real = {n for n, m in model.named_modules() if isinstance(m, RealQuantLinear)}
    assert "model.layers.0.self_attn.q_proj" in real
    assert not any(n.endswith("o_proj") for n in real) and "lm_head" not in real
    assert len(real) == 2 * 6


def test_casting_the_model_keeps_codes_and_float32_scales():
    model = quantize_real(tiny_model("llama"), "wfp8e4m3-a16-kv:16").to(torch.bfloat16)
    m = model.model.layers[0].mlp.down_proj
    assert m.weight_packed.dtype == torch.float8_e4m3fn and m.weight_scale.dtype == torch.float32
    with torch.no_grad():
        assert model(prompt()).logits.dtype == torch.bfloat16


@pytest.mark.parametrize("spec, message", [
    ("w4g32-a8-kv:16", r"activations \(a8\) are quantized on the fly"),
    ("w4g32-a16-kv:fp8e4m3@unit", "KV-cache quantization has no real storage"),
    ("wfp8e4m3/4g32-a16-kv:16", "prefill and decode weights differ"),
    ("wnf4g64-a16-kv:16", "nf4.*no packed storage format"),
    ("w16-a16-kv:16", "quantizes no weights"),
])
def test_parts_without_storage_are_refused_with_the_reason(spec, message):
    with pytest.raises(ValueError, match=message):
        quantize_real(tiny_model("llama"), spec)


def test_moe_expert_banks_are_refused_with_a_skip_hint():
    with pytest.raises(ValueError, match=r"fused MoE expert bank.*'-skip:\*\.experts'"):
        quantize_real(tiny_model("mixtral"), "w4g32-a16-kv:16")


def test_fused_request_without_a_kernel_says_why():
    model = quantize_real(tiny_model("llama"), "wfp8e4m3-a16-kv:16", kernel="fused")
    with pytest.raises(ValueError, match="torch._scaled_mm needs CUDA, this is 'cpu'"):
        model(prompt())
    set_kernel(model, "dequant")
    model(prompt())


class _Proj(torch.nn.Module):
    def __init__(self, out: int):
        super().__init__()
        self.proj = torch.nn.Linear(64, out)

    def forward(self, x):
        return self.proj(x)


def test_a_cpu_int4_shape_the_packing_op_refuses_is_said_not_a_torch_crash():
    model = quantize_real(_Proj(24), "w4g32-a16-kv:16", kernel="fused")  # 24 outputs: % 8, not % 16
    with pytest.raises(ValueError, match="tinygemm int4 on CPU needs out_features % 16 == 0, got \\[24, 64\\]"):
        model(torch.randn(2, 64))
    auto = quantize_real(_Proj(24), "w4g32-a16-kv:16")
    auto(torch.randn(2, 64))  # auto dequantizes on the CPU


def test_loading_new_weights_replaces_the_fused_kernels_copy():
    torch.manual_seed(0)
    a = quantize_real(_Proj(32), "w4g32-a16-kv:16", kernel="fused")
    torch.manual_seed(1)
    b = quantize_real(_Proj(32), "w4g32-a16-kv:16", kernel="fused")
    x = torch.randn(2, 64)
    with torch.no_grad():
        a(x)  # prepares a's converted weight
        a.load_state_dict(b.state_dict())
        assert torch.equal(a(x), b(x))


def test_quantizing_twice_is_an_error():
    model = quantize_real(tiny_model("llama"), "w8-a16-kv:16")
    with pytest.raises(ValueError, match="already quantized"):
        quantize_real(model, "w8-a16-kv:16")


def test_restoring_a_real_quantized_model_says_it_cannot_and_why():
    model = qdrift.quantize(tiny_model("llama"), "w8-a16-kv:16", path="real")
    with pytest.raises(ValueError, match="quantized with path='real'.*reload the model"):
        qdrift.restore(model)
