"""Every architecture the installed transformers provides: quantize, generate, no-op exactness, error order."""

import pytest
import torch

import qdrift
from qdrift.quant.kv import QuantizedKVLayerMixin

from .conftest import ARCHS, prompt

SPECS = [
    "w8-a8-kv:8@dyn",
    "w4g32-a16-kv:fp8e4m3@unit",
    "wfp8e4m3/4g128-afp8e4m3/16-kv:fp8e4m3@unit",
    "wnf4g64-a16-k:2c8z@dyn-v:2g32z@dyn-win4",
    "wmxfp4-amxfp8-kv:fp8e5m2@unit",
]

EXPECTED = {"llama", "qwen2", "qwen3", "mistral", "gpt2", "gemma2", "gemma3", "phi3", "mixtral",
            "qwen2_moe", "qwen3_moe", "deepseek_v3", "glm4_moe"}


def test_every_expected_architecture_is_covered():
    import transformers

    missing = EXPECTED - set(ARCHS)
    assert not missing, f"transformers {transformers.__version__} lacks {missing}: check the tiny configs"


@pytest.mark.parametrize("arch", ARCHS)
def test_noop_spec_reproduces_baseline_exactly(arch):
    model = qdrift.tiny.tiny_model(arch)
    ids = prompt()
    with torch.no_grad():
        ref = model(ids).logits
        ref_gen = model.generate(ids, max_new_tokens=6, do_sample=False)
        qdrift.quantize(model, "w16-a16-kv:16")
        out = model(ids).logits
        gen = model.generate(ids, max_new_tokens=6, do_sample=False)
    assert torch.equal(ref, out)
    assert torch.equal(ref_gen, gen)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("spec", SPECS)
def test_specs_quantize_and_generate_with_cache(arch, spec):
    model = qdrift.tiny.tiny_model(arch)
    ids = prompt(n=20)
    with torch.no_grad():
        ref = model(ids).logits
        qdrift.quantize(model, spec)
        out = model.generate(ids, max_new_tokens=8, do_sample=False, return_dict_in_generate=True)
        logits = model(ids).logits
    assert out.sequences.shape == (2, 28)
    layers = [layer for layer in out.cache.layers if hasattr(layer, "keys")]
    assert layers and all(isinstance(layer, QuantizedKVLayerMixin) for layer in layers)
    assert torch.isfinite(logits).all()
    assert not torch.equal(ref, logits), "a quantizing spec left the logits untouched"


def _logit_error(arch: str, spec: str) -> float:
    model = qdrift.tiny.tiny_model(arch)
    ids = prompt(n=16)
    with torch.no_grad():
        ref = model(ids).logits
        qdrift.quantize(model, spec)
        out = model(ids).logits
    return float((out - ref).norm() / (ref - ref.mean(-1, keepdim=True)).norm())


@pytest.mark.parametrize("arch", ARCHS)
def test_error_grows_as_bits_shrink(arch):
    e8, e4, e2 = (_logit_error(arch, f"w{b}-a16-kv:16") for b in (8, 4, 2))
    assert 0 < e8 < e4 < e2, f"{arch}: logit error int8={e8:.3g} int4={e4:.3g} int2={e2:.3g}"


def test_bf16_model_quantizes_and_keeps_dtype():
    model = qdrift.tiny.tiny_model("llama", dtype=torch.bfloat16)
    qdrift.quantize(model, "w4g32-a8-kv:fp8e4m3@unit")
    with torch.no_grad():
        out = model.generate(prompt(), max_new_tokens=4, do_sample=False, return_dict_in_generate=True)
    assert model.model.layers[0].mlp.up_proj.weight.dtype == torch.bfloat16
    assert out.cache.layers[0].keys.dtype == torch.bfloat16


def test_mla_cache_quantizes_the_latent():
    """DeepSeek-V3 caches the compressed latent (one 'head'), as MLA serving engines do."""
    model = qdrift.tiny.tiny_model("deepseek_v3")
    qdrift.quantize(model, "w16-a16-kv:fp8e4m3@unit")
    with torch.no_grad():
        cache = model(prompt(), use_cache=True).cache
    keys = cache.layers[0].keys
    assert keys.shape[1] == 1 and keys.shape[-1] == model.config.kv_lora_rank
    assert torch.equal(keys, keys.to(torch.float8_e4m3fn).float())
