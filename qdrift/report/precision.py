"""Per-phase precision of a spec in short labels, for cards: 'KV cache: FP8-e4m3 (unit scales); ...'.

The long, exact descriptions come from `qdrift.spec.describe`; this gives the one-line summary a
reader scans first: KV cache, then weights and activations, each with its decode and prefill
precision when the two differ.
"""

from __future__ import annotations

from qdrift.spec.describe import describe_spec
from qdrift.spec.model import QuantSpec, TensorScheme

_FORMATS = {"fp8e4m3": "FP8-e4m3", "fp8e5m2": "FP8-e5m2", "nf4": "NF4", "mxfp4": "MXFP4", "mxfp8": "MXFP8",
            "nvfp4": "NVFP4"}
_SOURCES = {"unit": "unit scales", "static": "static scales", "dynamic": "dynamic scales"}
UNQUANTIZED = "unquantized"


def short_label(scheme: TensorScheme | None, kv: bool = False) -> str:
    """'INT4 g128', 'FP8-e4m3', 'INT2 c32 zero-point (dynamic scales)'; 'unquantized' for None."""
    if scheme is None:
        return UNQUANTIZED
    text = f"INT{scheme.bits}" if scheme.format == "int" else _FORMATS[scheme.format]
    if scheme.granularity == "group":
        text += f" g{scheme.group_size}"
    elif scheme.granularity == "channel" and scheme.group_size:
        text += f" c{scheme.group_size}"
    if scheme.format == "int" and not scheme.symmetric:
        text += " zero-point"
    if kv and scheme.source:
        text += f" ({_SOURCES.get(scheme.source, scheme.source)})"
    return text


def _phased(prefill: str, decode: str) -> str:
    return prefill if prefill == decode else f"{decode} (decode), {prefill} (prefill)"


def precision_of(spec: QuantSpec | str) -> dict:
    """The card's `precision` block: a summary line, per-phase labels, the KV cache and the full description."""
    spec = QuantSpec.parse(spec) if isinstance(spec, str) else spec
    phases = {p: {"weights": short_label(getattr(spec, p).weights),
                  "activations": short_label(getattr(spec, p).activations)} for p in ("prefill", "decode")}
    keys, values = short_label(spec.kv.keys, kv=True), short_label(spec.kv.values, kv=True)
    kv = keys if keys == values else f"keys {keys}, values {values}"
    if spec.kv.window:
        kv += f", the {spec.kv.window} most recent tokens unquantized"
    parts = [f"KV cache: {kv}"]
    parts += [f"{role}: {_phased(phases['prefill'][role], phases['decode'][role])}" for role in ("weights", "activations")]
    return {"summary": "; ".join(parts), **phases,
            "kv_cache": {"keys": keys, "values": values, "full_precision_window": spec.kv.window},
            "details": describe_spec(spec).splitlines()}
