"""Storage summaries: bits per weight and KV bytes per token, written out by hand for a tiny model."""

import pytest

import qdrift
from qdrift.quant.summary import summarize
from qdrift.spec import QuantSpec
from qdrift.tiny import tiny_model

SPEC = "w4g32-a16-kv:8tok@dyn"


def expected_kv_bytes(config) -> tuple[float, float]:
    """(int8 per token, fp32) bytes one token leaves in the cache: codes plus an fp16 scale per token
    and head, for keys and values of every layer."""
    layers, heads, dim = config.num_hidden_layers, config.num_key_value_heads, config.head_dim
    return layers * 2 * heads * (dim * 1 + 2), layers * 2 * heads * dim * 4


def test_a_quantized_model_reports_its_bits_and_kv_bytes():
    model = qdrift.quantize(tiny_model("llama"), SPEC)
    s = summarize(model)
    linears = [m for n, m in model.named_modules() if n.endswith(("_proj",))]
    assert len(s.rows) == len(linears) and s.weight_params == sum(m.weight.numel() for m in linears)
    assert s.bits_prefill == s.bits_decode == pytest.approx(4 + 16 / 32)  # int4 codes + an fp16 scale per 32
    assert (s.kv_bytes_per_token, s.kv_bytes_per_token_baseline) == expected_kv_bytes(model.config)


def test_a_spec_not_yet_applied_is_summarized_as_it_would_quantize():
    quantized = summarize(qdrift.quantize(tiny_model("llama"), SPEC))
    before = summarize(tiny_model("llama"), QuantSpec.parse(SPEC))
    assert [r.name for r in before.rows] == [r.name for r in quantized.rows]
    assert (before.bits_prefill, before.weight_params) == (quantized.bits_prefill, quantized.weight_params)
