"""Number formats as pure tensor functions (torch only).

Every format quantizes along the last dimension in blocks (`block_size=None`: the whole last
dimension is one block) with one scale per block; callers reshape to get per-tensor, per-channel,
per-group, per-token or per-head granularity.

    fmt = get_format("int4")
    y = fmt.fake_quantize(w, block_size=128, clip="mse")
"""

from __future__ import annotations

import difflib
import re

import torch

from qdrift.formats.base import CLIP_CHOICES, NumberFormat, Scales, parse_clip
from qdrift.formats.fp8 import FP8Format
from qdrift.formats.integer import MAX_BITS, MIN_BITS, IntFormat
from qdrift.formats.mx import MXFormat
from qdrift.formats.nf4 import NF4Format
from qdrift.formats.nvfp4 import NVFP4Format

__all__ = [
    "CLIP_CHOICES",
    "FP8Format",
    "IntFormat",
    "MXFormat",
    "NF4Format",
    "NVFP4Format",
    "NumberFormat",
    "Scales",
    "available_formats",
    "get_format",
    "parse_clip",
]


def _build() -> dict[str, NumberFormat]:
    formats: list[NumberFormat] = [IntFormat(b, symmetric=True) for b in range(MIN_BITS, MAX_BITS + 1)]
    formats += [IntFormat(b, symmetric=False) for b in range(MIN_BITS, MAX_BITS + 1)]
    formats += [
        FP8Format("fp8e4m3", torch.float8_e4m3fn),
        FP8Format("fp8e5m2", torch.float8_e5m2),
        NF4Format(),
        MXFormat("fp4"),
        MXFormat("fp8"),
        NVFP4Format(),
    ]
    return {f.name: f for f in formats}


# Formats are stateless, so one shared instance per name.
_REGISTRY: dict[str, NumberFormat] = _build()


def available_formats() -> list[str]:
    """Canonical names of every registered format."""
    return list(_REGISTRY)


def get_format(name: str) -> NumberFormat:
    """The format registered under `name` (e.g. "int4", "uint4", "fp8e4m3", "nf4", "mxfp4", "nvfp4")."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    m = re.fullmatch(r"u?int(\d+)", name) if isinstance(name, str) else None
    if m is not None:
        IntFormat(int(m.group(1)), symmetric=not name.startswith("u"))  # raises: bits out of 2..8
    close = difflib.get_close_matches(str(name), list(_REGISTRY), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(f"Unknown number format {name!r}.{hint} Available: {', '.join(_REGISTRY)}")
