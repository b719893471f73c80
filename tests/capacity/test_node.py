"""The published serving figures, reproduced with their assumptions stated."""

import pytest

from qdrift.capacity import (
    H200_GIB,
    KIMI_K2_RESERVE_GIB,
    kv_bytes_per_token,
    node_capacity,
    preset,
    weight_bytes,
    weight_plan,
)

GIB = 2**30


def total_weight_bytes(name: str, weights: str) -> float:
    return sum(weight_bytes(preset(name), weight_plan(weights)).values())


def test_kimi_latent_is_576_elements_per_layer_replicated_on_every_tp_rank():
    kv = preset("kimi-k2").kv
    assert kv_bytes_per_token(kv, "bf16", tp=8) == 61 * (512 + 64) * 2 == 70_272
    assert kv_bytes_per_token(kv, "bf16", tp=1) == kv_bytes_per_token(kv, "bf16", tp=8)


def test_kimi_per_token_bytes_agree_with_vllms_own_report():
    # vLLM recipes, Kimi-K2-Thinking on 8xH200 at TP8: "Available KV cache memory: 46.80 GiB",
    # "GPU KV cache size: 715,072 tokens" (the 46.80 is rounded to 0.01 GiB).
    tokens = 46.80 * GIB / kv_bytes_per_token(preset("kimi-k2").kv, "bf16", tp=8)
    assert abs(tokens / 715_072 - 1) < 2e-4


def test_kimi_k2x_int4_checkpoint_is_594_gb():
    # Kimi K2 Thinking / K2.5 ship int4 experts (group 32) and bf16 attention, shared experts, embeddings: ~594 GB.
    assert abs(total_weight_bytes("kimi-k2", "int4") / 594e9 - 1) < 0.01


def test_kimi_k2x_on_8xh200_caches_686k_tokens_in_bf16_and_twice_that_in_fp8():
    # Assumptions: INT4 K2.x checkpoint split over TP8; an H200's 140.4 GiB (143,771 MiB), 90% usable
    # (vLLM's default); 12.35 GiB per GPU of activations / CUDA graphs -- the one number fitted to the
    # published figure (vLLM's own log for K2-Thinking, 46.80 GiB available, implies 10.45 GiB).
    common = dict(gpus=8, tp=8, gpu_mem_gib=H200_GIB, memory_utilization=0.9, activation_reserve_gib=KIMI_K2_RESERVE_GIB)
    bf16 = node_capacity(preset("kimi-k2"), weight_plan("int4"), "bf16", **common)
    fp8 = node_capacity(preset("kimi-k2"), weight_plan("int4"), "fp8", **common)
    assert abs(bf16.max_cached_tokens / 686_000 - 1) < 0.02, bf16.max_cached_tokens
    assert abs(fp8.max_cached_tokens / 1_370_000 - 1) < 0.02, fp8.max_cached_tokens
    assert fp8.kv_bytes_per_token_per_gpu * 2 == bf16.kv_bytes_per_token_per_gpu  # per-tensor scales: exactly 2
    assert fp8.max_cached_tokens in (2 * bf16.max_cached_tokens, 2 * bf16.max_cached_tokens + 1)


def test_glm5_fp8_checkpoint_705_to_421_when_experts_go_int4():
    # Figures in GiB ("GB" as du and many model pages print it). FP8: every projection in fp8 with
    # 128x128 fp32 block scales, embeddings/lm_head/router/norms bf16. INT4: MLP weights (routed
    # experts incl. the MTP layer's, dense MLPs) int4 group 32, attention/shared experts/embeddings bf16.
    fp8 = total_weight_bytes("glm-5", "fp8") / GIB
    int4 = total_weight_bytes("glm-5", "int4") / GIB
    assert abs(fp8 / 705 - 1) < 0.01, fp8
    assert abs(int4 / 421 - 1) < 0.01, int4
    assert abs(fp8 / 8 / 88 - 1) < 0.01 and abs(int4 / 8 / 52 - 1) < 0.02  # per GPU at TP8


def test_gqa_cache_is_split_by_kv_heads_and_replicated_beyond_them():
    kv = preset("llama-3.1-70b").kv
    full = 80 * 2 * 8 * 128 * 2
    assert kv_bytes_per_token(kv, "bf16", tp=1) == full == 327_680
    assert kv_bytes_per_token(kv, "bf16", tp=8) == full / 8
    assert kv_bytes_per_token(preset("llama-3.1-8b").kv, "bf16", tp=16) == 32 * 2 * 1 * 128 * 2  # one head each
    with pytest.raises(ValueError, match="KV heads"):
        kv_bytes_per_token(kv, "bf16", tp=3)


def test_replicas_multiply_the_node_capacity():
    shape, plan = preset("llama-3.1-8b"), weight_plan("bf16")
    one = node_capacity(shape, plan, gpus=1, tp=1, gpu_mem_gib=80)
    eight = node_capacity(shape, plan, gpus=8, tp=1, gpu_mem_gib=80)
    assert eight.max_cached_tokens == 8 * one.max_cached_tokens
    expected = (80 * 2**30 * 0.9 - sum(weight_bytes(shape, plan).values())) // 131_072  # GiB, as nvidia-smi counts
    assert one.max_cached_tokens == expected


def test_a_model_that_does_not_fit_is_an_error():
    with pytest.raises(ValueError, match="does not fit"):
        node_capacity(preset("kimi-k2"), weight_plan("bf16"), gpus=8, tp=8, gpu_mem_gib=H200_GIB)


def test_bad_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="Valid: .*int4"):
        weight_plan("int3")
    with pytest.raises(ValueError, match="Valid: .*fp8"):
        kv_bytes_per_token(preset("kimi-k2").kv, "fp4")
    with pytest.raises(ValueError, match="Available: .*kimi-k2"):
        preset("kimi")
    with pytest.raises(ValueError, match="module class"):
        weight_plan("fp8", keep=["attn"])


def test_an_h200_is_its_143771_mib_not_141e9_bytes():
    # vLLM's log for K2-Thinking at TP8: 46.80 GiB available for the cache. With the whole 140.4 GiB
    # the rest of the 90% is the INT4 weights plus 10.45 GiB; reading "141 GB" as 141e9 bytes would
    # leave 9 GB per GPU out (the reserve would have to be 2.4 GB to match).
    assert H200_GIB * GIB == 143_771 * 2**20
    cap = node_capacity(preset("kimi-k2"), weight_plan("int4"), "bf16", activation_reserve_gib=10.45)
    assert abs(cap.cache_bytes_per_gpu / GIB - 46.80) < 0.01


def test_the_glm5_indexer_key_is_fp8_with_a_scale_per_128_whatever_the_kv_precision():
    # GLM-5 (DSA): 78 layers of a 512 + 64 latent plus a 128-element indexer key, which vLLM and SGLang
    # keep as FP8 codes and an FP32 scale per 128 elements (132 bytes) with a BF16 or an FP8 cache alike.
    kv = preset("glm-5").kv
    assert kv_bytes_per_token(kv, "bf16", tp=8) == 78 * (576 * 2 + 132) == 100_152
    assert kv_bytes_per_token(kv, "fp8", tp=8) == 78 * (576 + 132)
