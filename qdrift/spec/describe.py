"""Plain-English summaries of a spec, for disclosure cards."""

from __future__ import annotations

from qdrift.spec.model import KV_ROLES, LINEAR_ROLES, QuantSpec, TensorScheme

FORMAT_NAMES = {
    "fp8e4m3": "FP8 E4M3",
    "fp8e5m2": "FP8 E5M2",
    "nf4": "NF4 (4-bit NormalFloat)",
    "mxfp4": "MXFP4 (FP4 E2M1 elements)",
    "mxfp8": "MXFP8 (FP8 E4M3 elements)",
    "nvfp4": "NVFP4 (FP4 E2M1 elements)",
}
BLOCK_SCALES = {
    "mxfp4": "shared power-of-two (E8M0) scale per block",
    "mxfp8": "shared power-of-two (E8M0) scale per block",
    "nvfp4": "FP8 E4M3 scale per block and one FP32 scale per tensor",
}


def _granularity(s: TensorScheme, role: str) -> str:
    g, n = s.granularity, s.group_size
    if role == "weights":
        return {
            "tensor": "one scale per tensor",
            "channel": "one scale per output channel (row)",
            "group": f"groups of {n} along the input dim",
            "block": f"blocks of {n} along the input dim",
        }[g]
    if role == "activations":
        return {
            "token": "dynamic, one scale per token",
            "group": f"dynamic, groups of {n} within each token",
            "block": f"dynamic, blocks of {n} within each token",
            "tensor": "static, one calibrated scale per tensor",
        }[g]
    if g == "channel":
        if s.source == "dynamic":
            return f"dynamic, one scale per channel over blocks of {n} tokens"
        return "static, one calibrated scale per channel"
    return {
        "tensor": "one scale per tensor" if s.source == "unit" else "static, one calibrated scale per tensor",
        "head": "static, one calibrated scale per KV head",
        "token": "dynamic, one scale per token and head",
        "group": f"dynamic, groups of {n} along head_dim",
    }[g]


def _scales(s: TensorScheme, role: str) -> str:
    if s.source == "unit":
        return "unit scales (scale 1, no calibration)"
    clip = {"absmax": "absmax scales", "mse": "MSE-searched clipping"}.get(s.clip)
    text = clip or f"{s.clip[1:]}th-percentile clipping"
    if s.format in BLOCK_SCALES:
        block = BLOCK_SCALES[s.format]
        if s.format == "nvfp4" and role == "activations" and s.source == "dynamic":
            block = block.replace("per tensor", "per token")  # formats.nvfp4.NVFP4Format.token_scales
        text += f" ({block})"
    return text


def describe_scheme(scheme: TensorScheme | None, role: str | None = None, label: str | None = None) -> str:
    """One line: '<label>: <format>, <symmetry>, <granularity>, <rounding>, <scales>'."""
    if scheme is None:
        return f"{label or role or 'tensor'}: not quantized (model dtype)"
    role = role or scheme.implied_role
    parts = [f"int{scheme.bits}" if scheme.format == "int" else FORMAT_NAMES[scheme.format]]
    if scheme.format == "int":
        parts.append("symmetric" if scheme.symmetric else "asymmetric (zero-point)")
    parts.append(_granularity(scheme, role))
    parts.append(
        "round-to-nearest-even" if scheme.seed is None else f"stochastic rounding (seed {scheme.seed})"
    )
    parts.append(_scales(scheme, role))
    return f"{label or role}: {', '.join(parts)}"


def describe_spec(spec: QuantSpec) -> str:
    lines = [f"spec: {spec} (hash {spec.hash})"]
    if spec.is_noop:
        lines.append("nothing is quantized: every tensor stays in the model dtype")
    for role in LINEAR_ROLES:
        p, d = getattr(spec.prefill, role), getattr(spec.decode, role)
        label = role if role == "weights" else "activations (inputs of the selected Linears)"
        if p == d:
            lines.append(describe_scheme(p, role, label))
        else:
            lines.append(describe_scheme(p, role, f"prefill {label}"))
            lines.append(describe_scheme(d, role, f"decode {label}"))
    if spec.phase_split:
        lines.append("phases: prefill (multi-token forwards) and decode (single-token forwards) differ")
    kv = spec.kv
    if kv.keys == kv.values:
        lines.append(describe_scheme(kv.keys, "keys", "KV cache keys and values"))
    else:
        lines += [describe_scheme(getattr(kv, r), r, f"KV cache {r}") for r in KV_ROLES]
    if kv.window:
        lines.append(f"KV window: the {kv.window} most recent tokens stay in full precision")
    if spec.include:
        modules = f"modules: only those matching {', '.join(spec.include)}"
    else:
        modules = "modules: every decoder Linear (lm_head, embeddings and MoE routers excluded)"
    if spec.exclude:
        modules += f"; skipping those matching {', '.join(spec.exclude)}"
    lines.append(modules)
    return "\n".join(lines)
