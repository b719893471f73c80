"""Named model configs (the config.json fields the capacity model reads), each with its source."""

from __future__ import annotations

from qdrift.capacity.shape import ModelShape, shape_from_config
from qdrift.spec.model import did_you_mean

PRESETS: dict[str, dict] = {
    "kimi-k2": {
        "source": "moonshotai/Kimi-K2-Instruct config.json (DeepSeek-V3 architecture; same text config in "
                  "Kimi-K2-Thinking and Kimi-K2.5's text_config)",
        "config": {
            "model_type": "kimi_k2", "vocab_size": 163840, "hidden_size": 7168, "intermediate_size": 18432,
            "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64,
            "num_key_value_heads": 64, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
            "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 384, "n_shared_experts": 1,
            "num_experts_per_tok": 8, "first_k_dense_replace": 1, "num_nextn_predict_layers": 0,
            "tie_word_embeddings": False, "attention_bias": False,
        },
    },
    "glm-5": {
        "source": "zai-org/GLM-5 config.json (glm_moe_dsa: MLA + DeepSeek sparse-attention indexer, 78 layers, "
                  "256 experts, one MTP layer; transformers' GlmMoeDsaConfig defaults are these values)",
        "config": {
            "model_type": "glm_moe_dsa", "vocab_size": 154880, "hidden_size": 6144, "intermediate_size": 12288,
            "moe_intermediate_size": 2048, "num_hidden_layers": 78, "num_attention_heads": 64,
            "num_key_value_heads": 64, "q_lora_rank": 2048, "kv_lora_rank": 512, "qk_nope_head_dim": 192,
            "qk_rope_head_dim": 64, "v_head_dim": 256, "n_routed_experts": 256, "n_shared_experts": 1,
            "num_experts_per_tok": 8, "first_k_dense_replace": 3, "num_nextn_predict_layers": 1,
            "index_n_heads": 32, "index_head_dim": 128, "tie_word_embeddings": False, "attention_bias": False,
        },
    },
    "llama-3.1-70b": {
        "source": "meta-llama/Llama-3.1-70B-Instruct config.json (GQA: 64 query heads, 8 KV heads)",
        "config": {
            "model_type": "llama", "vocab_size": 128256, "hidden_size": 8192, "intermediate_size": 28672,
            "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        },
    },
    "llama-3.1-8b": {
        "source": "meta-llama/Llama-3.1-8B-Instruct config.json (GQA: 32 query heads, 8 KV heads)",
        "config": {
            "model_type": "llama", "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        },
    },
}


def preset(name: str) -> ModelShape:
    """The shape of a named preset, or a ValueError listing them."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}.{did_you_mean(name, PRESETS)} Available: {', '.join(PRESETS)}")
    entry = PRESETS[name]
    return shape_from_config(entry["config"], name=name, source=entry["source"])
