"""Parameter counts from a config against the models transformers builds from the same config."""

import collections

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    DeepseekV3Config,
    GlmMoeDsaConfig,
    LlamaConfig,
    Qwen2Config,
    Qwen3Config,
)

from qdrift.capacity import PRESETS, shape_from_config


def classify(name: str) -> str:
    if "embed_tokens" in name:
        return "embed"
    if name.startswith("lm_head"):
        return "lm_head"
    if ".self_attn." in name:
        return "attention"
    if ".shared_experts." in name:
        return "shared_experts"
    if ".experts." in name:
        return "routed_experts"
    if ".mlp.gate." in name:
        return "router"
    if ".mlp." in name:
        return "dense_mlp"
    return "norms"


def counts_of_built_model(config) -> dict:
    """Per-class element counts: parameters (tied ones once) and the router's stored correction bias."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    out = collections.Counter()
    tensors = list(model.named_parameters()) + [
        (n, b) for n, b in model.named_buffers() if n.endswith("e_score_correction_bias")]
    for name, t in tensors:
        out[classify(name)] += t.numel()
    return out


# transformers builds no MTP layer, so the tiny DeepSeek configs declare none (the full-size test removes it).
TINY = {
    "llama": LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                         num_attention_heads=8, num_key_value_heads=2),
    "llama-bias-tied": LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=4, attention_bias=True,
                                   mlp_bias=True, tie_word_embeddings=True),
    "qwen2": Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2),
    "qwen3": Qwen3Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=24),
    "deepseek_v3": DeepseekV3Config(vocab_size=97, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                    num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                                    n_routed_experts=6, n_shared_experts=1, num_experts_per_tok=2, n_group=1,
                                    topk_group=1, first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16,
                                    qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=12,
                                    num_nextn_predict_layers=0),
    "deepseek_v3-no-q-lora": DeepseekV3Config(vocab_size=97, hidden_size=64, intermediate_size=96,
                                              moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                                              num_key_value_heads=4, n_routed_experts=4, n_shared_experts=2,
                                              num_experts_per_tok=2, n_group=1, topk_group=1,
                                              first_k_dense_replace=0, q_lora_rank=None, kv_lora_rank=16,
                                              qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                                              attention_bias=True, num_nextn_predict_layers=0),
    "glm_moe_dsa": GlmMoeDsaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                                   num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
                                   n_routed_experts=6, n_shared_experts=1, num_experts_per_tok=2,
                                   first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16, qk_nope_head_dim=8,
                                   qk_rope_head_dim=4, v_head_dim=12, index_n_heads=2, index_head_dim=8),
}


@pytest.mark.parametrize("name", list(TINY))
def test_counts_per_module_class_match_the_built_model(name):
    config = TINY[name]
    shape = shape_from_config(config)  # a PretrainedConfig object
    built = counts_of_built_model(config)
    ours = {c: n for c, n in shape.params.items() if n}
    assert ours == dict(built), f"{name}: ours {ours} vs built {dict(built)}"


def test_a_config_json_dict_gives_the_same_counts_as_the_config_object():
    config = TINY["deepseek_v3"]
    assert shape_from_config(config.to_dict()).params == shape_from_config(config).params


@pytest.mark.parametrize("preset_name, config_class", [("kimi-k2", DeepseekV3Config), ("glm-5", GlmMoeDsaConfig)])
def test_full_size_presets_match_the_model_built_on_the_meta_device(preset_name, config_class):
    fields = dict(PRESETS[preset_name]["config"])
    fields.pop("model_type")
    mtp = fields.pop("num_nextn_predict_layers")
    shape = shape_from_config(PRESETS[preset_name]["config"])
    built = counts_of_built_model(config_class(**fields, n_group=1, topk_group=1))
    # transformers builds no MTP layer: take it out of ours (one more layer of attention, MoE and norms).
    n_layers = fields["num_hidden_layers"]
    n_moe = n_layers - fields["first_k_dense_replace"]
    ours = dict(shape.params)
    for cls in ("routed_experts", "shared_experts", "router"):
        ours[cls] = ours[cls] * n_moe // (n_moe + mtp)
    ours["attention"] = ours["attention"] * n_layers // (n_layers + mtp)
    ours["norms"] -= mtp * 2 * fields["hidden_size"]
    ours.pop("mtp")
    assert {c: n for c, n in ours.items() if n} == dict(built)


def test_published_totals():
    kimi = shape_from_config(PRESETS["kimi-k2"]["config"]).total_params
    glm = shape_from_config(PRESETS["glm-5"]["config"]).total_params
    assert abs(kimi / 1.026e12 - 1) < 0.005, kimi  # Kimi K2: "1.04T" in the card, 1.026T counted
    assert abs(glm / 753.9e9 - 1) < 0.001, glm  # GLM-5 with its MTP layer: 753.9B on the model page


def test_multimodal_wrapper_reads_text_config():
    wrapped = {"model_type": "kimi_k25", "text_config": PRESETS["kimi-k2"]["config"]}
    assert shape_from_config(wrapped).params == shape_from_config(PRESETS["kimi-k2"]["config"]).params


def test_unsupported_model_type_names_the_supported_ones():
    with pytest.raises(ValueError, match="not supported.*llama"):
        shape_from_config({"model_type": "gpt2"})


def test_missing_field_is_named():
    with pytest.raises(ValueError, match="kv_lora_rank"):
        shape_from_config({**PRESETS["kimi-k2"]["config"], "kv_lora_rank": None})
