"""Storage bits per element of the precisions a serving stack stores weights and KV caches in.

Scale overheads come from qdrift.formats (`bits_per_element`), so the capacity model and the
fake-quantization layers agree on what a format costs.
"""

from __future__ import annotations

from dataclasses import dataclass

from qdrift.formats import get_format
from qdrift.spec.model import did_you_mean


@dataclass(frozen=True)
class Precision:
    name: str
    bits: float  # per element, scales included
    meaning: str


def _fmt(name: str, block: int | None) -> float:
    return get_format(name).bits_per_element(block)


# Weight precisions: how released checkpoints store them.
WEIGHTS: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", 32.0, "float32"),
    Precision("bf16", 16.0, "bfloat16"),
    Precision("fp16", 16.0, "float16"),
    Precision("fp8", _fmt("fp8e4m3", 128 * 128),
              "fp8 e4m3 with one fp32 scale per 128x128 block (DeepSeek-V3, Kimi K2, GLM FP8 releases)"),
    Precision("int8", _fmt("int8", None), "int8 with per-channel scales (amortised to ~0)"),
    Precision("int4", _fmt("int4", 32),
              "int4 symmetric, one 16-bit scale per 32 weights (compressed-tensors pack-quantized, as Kimi K2 Thinking/K2.5 ship)"),
    Precision("int4g128", _fmt("int4", 128), "int4 symmetric, one 16-bit scale per 128 weights (GPTQ/AWQ-style)"),
    Precision("nvfp4", _fmt("nvfp4", None), "NVFP4: e2m1 with an fp8 scale per 16 elements"),
    Precision("mxfp4", _fmt("mxfp4", None), "MXFP4: e2m1 with an e8m0 scale per 32 elements"),
)}

# KV-cache precisions: per-tensor scales (vLLM/SGLang fp8 caches) amortise to ~0.
KV: dict[str, Precision] = {p.name: p for p in (
    Precision("fp32", 32.0, "float32"),
    Precision("bf16", 16.0, "bfloat16"),
    Precision("fp16", 16.0, "float16"),
    Precision("fp8", _fmt("fp8e4m3", None), "fp8 e4m3 with a per-tensor scale"),
    Precision("fp8e5m2", _fmt("fp8e5m2", None), "fp8 e5m2 with a per-tensor scale"),
)}


def lookup(name: str, table: dict[str, Precision], what: str) -> Precision:
    """The precision called `name`, or a ValueError naming the valid ones."""
    if name in table:
        return table[name]
    raise ValueError(f"unknown {what} precision {name!r}.{did_you_mean(name, table)} Valid: {', '.join(table)}")
