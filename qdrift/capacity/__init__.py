"""Serving-memory arithmetic: weight bytes per precision, KV bytes per token, cached tokens per node.

    from qdrift.capacity import preset, weight_plan, node_capacity
    cap = node_capacity(preset("kimi-k2"), weight_plan("int4"), kv_precision="bf16", gpus=8, tp=8)
    print(cap.render())

Every assumption is a parameter; see qdrift.capacity.node and qdrift.capacity.plan.
"""

from qdrift.capacity.node import (
    GB,
    GIB,
    H200_GIB,
    KIMI_K2_RESERVE_GIB,
    NodeCapacity,
    indexer_bytes,
    kv_bytes_per_token,
    node_capacity,
)
from qdrift.capacity.plan import WeightPlan, weight_bytes, weight_plan
from qdrift.capacity.precision import KV, WEIGHTS
from qdrift.capacity.presets import PRESETS, preset
from qdrift.capacity.shape import CLASSES, KVLayout, ModelShape, shape_from_config

__all__ = [
    "CLASSES", "GB", "GIB", "H200_GIB", "KIMI_K2_RESERVE_GIB", "KV", "PRESETS", "WEIGHTS", "KVLayout", "ModelShape", "NodeCapacity", "WeightPlan",
    "indexer_bytes", "kv_bytes_per_token", "node_capacity", "preset", "shape_from_config", "weight_bytes", "weight_plan",
]
