"""Parameter counts per module class and the KV-cache layout, derived from a transformers config.

Why by hand: serving memory is planned before a model is loaded (often before it is downloaded),
from its config.json alone; transformers builds modules, it does not count them from a config.
The formulas are checked in the tests against `sum(p.numel())` of models that transformers builds
from the same configs (tiny ones, and the full-size ones on the meta device).

Module classes (what a precision plan assigns precisions to):
    embed, lm_head, attention (projections, their norms, a sparse-attention indexer),
    dense_mlp, shared_experts, routed_experts, router, norms (per-layer and final), mtp (the
    multi-token-prediction head's own projection and norms; its decoder layer is counted in the
    classes above).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

CLASSES = ("embed", "lm_head", "attention", "dense_mlp", "shared_experts", "routed_experts", "router", "norms", "mtp")
LLAMA_LIKE = ("llama", "mistral", "qwen2", "qwen3")
MLA_MOE = ("deepseek_v3", "kimi_k2", "glm_moe_dsa")
SUPPORTED = LLAMA_LIKE + MLA_MOE


@dataclass(frozen=True)
class KVLayout:
    """What one token leaves in the cache per layer.

    mla: the compressed latent (kv_lora_rank) plus the decoupled RoPE key (qk_rope_head_dim), one
    vector shared by all heads; `index_dim` adds a sparse-attention indexer key (GLM-5 / DSA).
    gqa: keys and values of `kv_heads` heads of `head_dim` each.
    """

    kind: str  # "mla" or "gqa"
    layers: int
    kv_heads: int = 0
    head_dim: int = 0
    latent_dim: int = 0
    index_dim: int = 0


@dataclass(frozen=True)
class ModelShape:
    """A model's parameters per module class and its KV layout."""

    name: str
    model_type: str
    params: Mapping[str, int]
    kv: KVLayout
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    @property
    def total_params(self) -> int:
        return sum(self.params.values())


def _get(cfg, key: str, default=None):
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _need(cfg, key: str, model_type: str):
    value = _get(cfg, key)
    if value is None:
        raise ValueError(f"config of model_type {model_type!r} lacks {key!r}, which the capacity model needs")
    return value


def text_config(cfg):
    """The language model's config: `text_config` of a multimodal wrapper (Kimi K2.5), else itself."""
    inner = _get(cfg, "text_config")
    return inner if inner is not None else cfg


def shape_from_config(cfg, name: str | None = None, source: str = "") -> ModelShape:
    """Parameter counts and KV layout of a transformers config (a config.json dict or a PretrainedConfig)."""
    cfg = text_config(cfg)
    model_type = _get(cfg, "model_type")
    if model_type in LLAMA_LIKE:
        params, kv = _llama_like(cfg, model_type)
    elif model_type in MLA_MOE:
        params, kv = _mla_moe(cfg, model_type)
    else:
        raise ValueError(
            f"model_type {model_type!r} is not supported by the capacity model. Supported: {', '.join(SUPPORTED)}"
        )
    return ModelShape(name or str(model_type), model_type, params, kv, source)


def _embeddings(cfg, model_type: str, counts: dict) -> None:
    vocab, hidden = _need(cfg, "vocab_size", model_type), _need(cfg, "hidden_size", model_type)
    counts["embed"] = vocab * hidden
    counts["lm_head"] = 0 if _get(cfg, "tie_word_embeddings", False) else vocab * hidden
    counts["norms"] += hidden  # final norm


def _llama_like(cfg, model_type: str) -> tuple[dict, KVLayout]:
    counts = dict.fromkeys(CLASSES, 0)
    _embeddings(cfg, model_type, counts)
    h, layers = _need(cfg, "hidden_size", model_type), _need(cfg, "num_hidden_layers", model_type)
    heads = _need(cfg, "num_attention_heads", model_type)
    kv_heads = _get(cfg, "num_key_value_heads") or heads
    head_dim = _get(cfg, "head_dim") or h // heads
    inter = _need(cfg, "intermediate_size", model_type)
    q, kv = heads * head_dim, kv_heads * head_dim
    attn = h * q + 2 * h * kv + q * h
    if model_type == "qwen2" or _get(cfg, "attention_bias", False):
        attn += q + 2 * kv + (h if model_type != "qwen2" else 0)  # qwen2: q/k/v biases only
    if model_type == "qwen3":
        attn += 2 * head_dim  # q_norm, k_norm
    mlp = 3 * h * inter + ((2 * inter + h) if _get(cfg, "mlp_bias", False) else 0)
    counts["attention"] = layers * attn
    counts["dense_mlp"] = layers * mlp
    counts["norms"] += layers * 2 * h
    return counts, KVLayout("gqa", layers, kv_heads=kv_heads, head_dim=head_dim)


def _mla_attention(cfg, model_type: str) -> int:
    """One MLA block: low-rank query, joint KV down-projection to the latent, per-head up-projections."""
    h, heads = _need(cfg, "hidden_size", model_type), _need(cfg, "num_attention_heads", model_type)
    q_rank, kv_rank = _get(cfg, "q_lora_rank"), _need(cfg, "kv_lora_rank", model_type)
    nope, rope = _need(cfg, "qk_nope_head_dim", model_type), _need(cfg, "qk_rope_head_dim", model_type)
    v_dim = _need(cfg, "v_head_dim", model_type)
    bias = bool(_get(cfg, "attention_bias", False))
    qk = heads * (nope + rope)
    if q_rank:
        n = h * q_rank + q_rank * bias + q_rank + q_rank * qk  # q_a_proj (+bias), q_a_layernorm, q_b_proj
    else:
        n = h * qk
    n += h * (kv_rank + rope) + (kv_rank + rope) * bias + kv_rank  # kv_a_proj_with_mqa (+bias), kv_a_layernorm
    n += kv_rank * heads * (nope + v_dim)  # kv_b_proj
    n += heads * v_dim * h + h * bias  # o_proj
    if model_type == "glm_moe_dsa":  # DeepSeek sparse-attention indexer: wq_b, wk, k_norm (LayerNorm), weights_proj
        ih, idim = _need(cfg, "index_n_heads", model_type), _need(cfg, "index_head_dim", model_type)
        n += q_rank * ih * idim + h * idim + 2 * idim + h * ih
    return n


def _mla_moe(cfg, model_type: str) -> tuple[dict, KVLayout]:
    counts = dict.fromkeys(CLASSES, 0)
    _embeddings(cfg, model_type, counts)
    h, layers = _need(cfg, "hidden_size", model_type), _need(cfg, "num_hidden_layers", model_type)
    n_dense = min(_get(cfg, "first_k_dense_replace", 0) or 0, layers)
    mlp_types = _get(cfg, "mlp_layer_types")
    if mlp_types:
        n_dense = sum(t == "dense" for t in mlp_types)
    experts, shared = _need(cfg, "n_routed_experts", model_type), _get(cfg, "n_shared_experts", 0) or 0
    moe_inter, inter = _need(cfg, "moe_intermediate_size", model_type), _need(cfg, "intermediate_size", model_type)
    attn = _mla_attention(cfg, model_type)
    mtp = _get(cfg, "num_nextn_predict_layers", 0) or 0
    n_moe = layers - n_dense + mtp  # a multi-token-prediction layer is one more MoE decoder layer
    counts["attention"] = (layers + mtp) * attn
    counts["dense_mlp"] = n_dense * 3 * h * inter
    counts["routed_experts"] = n_moe * experts * 3 * h * moe_inter
    counts["shared_experts"] = n_moe * 3 * h * moe_inter * shared
    counts["router"] = n_moe * (experts * h + experts)  # gate weight + e_score_correction_bias
    counts["norms"] += (layers + mtp) * 2 * h
    # MTP head: eh_proj (2h -> h), enorm, hnorm, its final norm; embeddings and lm_head shared with the model.
    counts["mtp"] = mtp * (2 * h * h + 3 * h)
    rope, kv_rank = _need(cfg, "qk_rope_head_dim", model_type), _need(cfg, "kv_lora_rank", model_type)
    index_dim = _need(cfg, "index_head_dim", model_type) if model_type == "glm_moe_dsa" else 0
    return counts, KVLayout("mla", layers, latent_dim=kv_rank + rope, index_dim=index_dim)
