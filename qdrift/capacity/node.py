"""How many tokens of KV cache fit on a node, after the weights and a reserve.

Assumptions (each one a parameter, defaults in brackets):
- Tensor parallelism shards every weight evenly over the `tp` ranks of a replica; replicas
  (`gpus // tp` of them) each hold a full copy. (Small replicated pieces, such as MLA's latent
  down-projections, are ignored: under 1% of a large model.)
- MLA (DeepSeek-V3, Kimi K2, GLM-5): the compressed latent is one vector per token shared by all
  heads, so under TP every rank caches the whole latent (vLLM, SGLang without context
  parallelism); TP does not divide it.
- GQA: each rank caches its kv_heads / tp heads; when tp > kv_heads, heads are replicated so that
  each rank still holds one.
- A sparse-attention indexer key (GLM-5 / DeepSeek DSA) is cached as FP8 codes with an FP32 scale
  per 128 elements whatever the KV precision (vLLM's and SGLang's indexer cache), so it does not
  shrink with an FP8 cache.
- Per GPU the engine may use `memory_utilization` of the GPU's memory [0.9, vLLM's
  gpu_memory_utilization default]; from that it subtracts the rank's weights and
  `activation_reserve_gib` (activations, CUDA graphs, communication buffers) [0]. The rest is cache.
- GPU memory and the reserve are in GiB (2^30 bytes), as nvidia-smi (MiB) and torch report them
  and vLLM's logs print them. A spec sheet's "141 GB" H200 is 143,771 MiB = 140.4 GiB (150.8e9
  bytes), so reading it as 141e9 bytes would lose 9 GB per GPU. Weights print in both units.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qdrift.capacity.plan import WeightPlan, weight_bytes
from qdrift.capacity.precision import KV, lookup
from qdrift.capacity.shape import KVLayout, ModelShape

GB = 1e9
GIB = 2**30
H200_GIB = 143_771 / 1024  # nvidia-smi's total for an H200 (143,771 MiB)
# Per-GPU activations / CUDA graphs for Kimi K2.x at INT4 on 8xH200 (TP8, 90% usable): the one number
# fitted to the published ~686k BF16-cached tokens (vLLM's own log for K2-Thinking implies 10.45 GiB).
KIMI_K2_RESERVE_GIB = 12.35
INDEX_SCALE_BLOCK = 128  # elements of an indexer key per FP32 scale


def indexer_bytes(index_dim: int) -> int:
    """Bytes of one layer's indexer key per token: FP8 codes plus an FP32 scale per 128 elements."""
    return index_dim + 4 * math.ceil(index_dim / INDEX_SCALE_BLOCK) if index_dim else 0


def kv_bytes_per_token(kv: KVLayout, precision: str, tp: int = 1) -> float:
    """Cache bytes one token takes on one GPU of a `tp`-way tensor-parallel replica."""
    bits = lookup(precision, KV, "KV-cache").bits
    if kv.kind == "mla":  # the latent (and any indexer key) is replicated on every rank
        return kv.layers * (kv.latent_dim * bits / 8 + indexer_bytes(kv.index_dim))
    if kv.kv_heads % tp and tp % kv.kv_heads:
        raise ValueError(f"tp={tp} neither divides nor is a multiple of the {kv.kv_heads} KV heads")
    heads_per_rank = max(1, kv.kv_heads // tp)
    return kv.layers * 2 * heads_per_rank * kv.head_dim * bits / 8


@dataclass(frozen=True)
class NodeCapacity:
    model: str
    plan: str
    kv_precision: str
    gpus: int
    tp: int
    gpu_mem_gib: float
    memory_utilization: float
    activation_reserve_gib: float
    weight_bytes: float  # the whole model, one copy
    weight_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    cache_bytes_per_gpu: float
    max_cached_tokens: int  # on the whole node, all replicas

    @property
    def replicas(self) -> int:
        return self.gpus // self.tp

    def render(self) -> str:
        return "\n".join([
            f"model: {self.model}",
            f"weights: {self.plan}",
            f"weight bytes: {self.weight_bytes / GB:,.1f} GB ({self.weight_bytes / 2**30:,.1f} GiB); "
            f"{self.weight_bytes_per_gpu / GB:,.1f} GB ({self.weight_bytes_per_gpu / GIB:,.1f} GiB) per GPU at TP{self.tp}",
            f"KV cache ({self.kv_precision}): {self.kv_bytes_per_token_per_gpu:,.0f} bytes per token per GPU",
            f"per GPU: {self.gpu_mem_gib:g} GiB x {self.memory_utilization:g} - weights - "
            f"{self.activation_reserve_gib:g} GiB reserve = {self.cache_bytes_per_gpu / GIB:,.2f} GiB of cache",
            f"max cached tokens on {self.gpus} GPUs ({self.replicas} replica(s) of TP{self.tp}): "
            f"{self.max_cached_tokens:,}",
        ])


def node_capacity(
    shape: ModelShape,
    plan: WeightPlan,
    kv_precision: str = "bf16",
    gpus: int = 8,
    tp: int = 8,
    gpu_mem_gib: float = H200_GIB,
    memory_utilization: float = 0.9,
    activation_reserve_gib: float = 0.0,
) -> NodeCapacity:
    """The node's KV-cache capacity in tokens; raises when the weights do not fit."""
    if tp < 1 or gpus < 1 or gpus % tp:
        raise ValueError(f"gpus ({gpus}) must be a positive multiple of tp ({tp})")
    if not 0 < memory_utilization <= 1:
        raise ValueError(f"memory_utilization must be in (0, 1], got {memory_utilization}")
    if gpu_mem_gib <= 0 or activation_reserve_gib < 0:
        raise ValueError("gpu_mem_gib must be positive and activation_reserve_gib non-negative")
    total = sum(weight_bytes(shape, plan).values())
    per_gpu = total / tp
    cache = gpu_mem_gib * GIB * memory_utilization - per_gpu - activation_reserve_gib * GIB
    if cache <= 0:
        raise ValueError(
            f"{shape.name} does not fit: {per_gpu / GIB:,.1f} GiB of weights per GPU at TP{tp} plus "
            f"{activation_reserve_gib:g} GiB reserve exceed {gpu_mem_gib:g} GiB x {memory_utilization:g}"
        )
    per_token = kv_bytes_per_token(shape.kv, kv_precision, tp)
    tokens = math.floor(cache / per_token) * (gpus // tp)
    return NodeCapacity(
        shape.name, plan.describe(), kv_precision, gpus, tp, gpu_mem_gib, memory_utilization,
        activation_reserve_gib, total, per_gpu, per_token, cache, tokens,
    )
