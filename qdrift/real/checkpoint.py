"""Save and load really-quantized models as safetensors in the compressed-tensors layout.

What serving engines (vLLM, SGLang) load: config.json with a `quantization_config` whose
quant_method is "compressed-tensors", and per quantized Linear either
- "pack-quantized" (int4, int8): weight_packed (int32, codes packed by compressed-tensors'
  own `pack_to_int32`), weight_scale, weight_zero_point (asymmetric; packed along the output dim for
  group/channel), weight_shape;
- "float-quantized" (fp8e4m3): weight (float8_e4m3fn), weight_scale.
compressed-tensors keeps integer codes signed, [-2^(b-1), 2^(b-1) - 1], with a signed zero point;
qdrift's asymmetric codes and zero points are unsigned, so both are shifted by 2^(b-1), which
leaves (q - zp) and so every weight unchanged. Scales stay float32 (scale_dtype says so), so the
checkpoint dequantizes to exactly the fake path's weights.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from qdrift.real.convert import SPEC_ATTR, real_modules, real_spec_of
from qdrift.real.linear import RealQuantLinear
from qdrift.real.packing import PackedWeight
from qdrift.spec import QuantSpec, TensorScheme

WEIGHTS_FILE = "model.safetensors"
PACKED, FLOAT = "pack-quantized", "float-quantized"
STRATEGIES = {"tensor": "tensor", "channel": "channel", "group": "group"}


def _ct():
    try:
        import compressed_tensors.quantization as q
        from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32, unpack_from_int32
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"saving/loading real checkpoints needs compressed-tensors ({e}); "
                                  "pip install 'qdrift[real]'") from None
    return q, pack_to_int32, unpack_from_int32


def quantization_args(scheme: TensorScheme):
    """compressed-tensors' QuantizationArgs for a stored weight scheme, or a ValueError naming what it lacks."""
    q, _, _ = _ct()
    if scheme.granularity not in STRATEGIES:
        raise ValueError(f"compressed-tensors has no strategy for weight granularity {scheme.granularity!r} "
                         f"('{scheme}'). Expressible: {', '.join(STRATEGIES)}")
    if scheme.format == "int" and scheme.bits in (4, 8):
        kind = "int"
    elif scheme.format == "fp8e4m3":
        kind = "float"
    else:
        raise ValueError(f"compressed-tensors checkpoints are written here for int4, int8 and fp8e4m3 weights, "
                         f"not '{scheme}'")
    return q.QuantizationArgs(
        num_bits=scheme.bits, type=kind, symmetric=scheme.symmetric, strategy=STRATEGIES[scheme.granularity],
        group_size=scheme.group_size if scheme.granularity == "group" else None,
        scale_dtype=torch.float32, zp_dtype=None if scheme.symmetric else torch.int8)


def scheme_from_args(args) -> TensorScheme:
    """The qdrift weight scheme of compressed-tensors QuantizationArgs (what load can hold)."""
    strategy = str(getattr(args.strategy, "value", args.strategy))
    if strategy not in STRATEGIES.values():
        raise ValueError(f"compressed-tensors strategy {strategy!r} is not loadable here. Valid: {', '.join(STRATEGIES)}")
    kind = str(getattr(args.type, "value", args.type))
    fmt = "int" if kind == "int" else "fp8e4m3" if (kind, args.num_bits) == ("float", 8) else None
    if fmt is None or (fmt == "int" and args.num_bits not in (4, 8)):
        raise ValueError(f"compressed-tensors weights of type {kind} with {args.num_bits} bits are not loadable here; "
                         "valid: int 4, int 8, float 8 (e4m3)")
    return TensorScheme(fmt, args.num_bits, strategy, args.group_size if strategy == "group" else None,
                        symmetric=bool(args.symmetric))


def _ct_scale_shape(scheme: TensorScheme, scale: torch.Tensor) -> torch.Tensor:
    return scale.reshape(1) if scheme.granularity == "tensor" else scale


def compress_module(m: RealQuantLinear) -> dict[str, torch.Tensor]:
    """The compressed-tensors tensors of one module (local names)."""
    _, pack_to_int32, _ = _ct()
    from qdrift.real.packing import codes_of

    p, s = m.packed, m.scheme
    out: dict[str, torch.Tensor] = {"weight_scale": _ct_scale_shape(s, p.scale).float().contiguous().cpu()}
    if s.format == "fp8e4m3":
        out["weight"] = p.data.contiguous().cpu()
    else:
        half = 1 << (s.bits - 1)
        codes = codes_of(p).to(torch.int16)
        signed = (codes if s.symmetric else codes - half).to(torch.int8)
        out["weight_packed"] = pack_to_int32(signed.cpu(), s.bits)
        out["weight_shape"] = torch.tensor(p.shape)
        if not s.symmetric:
            zp = (p.zero_point.to(torch.int16) - half).to(torch.int8).cpu()
            out["weight_zero_point"] = (zp.reshape(1) if s.granularity == "tensor"
                                        else pack_to_int32(zp, s.bits, packed_dim=0).contiguous())
    if m.bias is not None:
        out["bias"] = m.bias.detach().cpu().contiguous()
    return out


CHECKSUMS = "qdrift_sha256"  # safetensors metadata: JSON {tensor name: sha256 of its bytes}, written at save


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 of a tensor's dtype, shape and bytes (float8 and bfloat16 read as raw bytes)."""
    raw = t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)
    h = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(raw.numpy().tobytes())
    return h.hexdigest()


def _check_checksums(tensors: dict[str, torch.Tensor], metadata: dict | None, path: Path) -> None:
    """Every tensor a qdrift checkpoint recorded a checksum for must still have it (random bytes in the
    packed data once loaded with |delta logit| up to 13). Checkpoints of other tools carry none."""
    recorded = json.loads((metadata or {}).get(CHECKSUMS, "{}"))
    bad = [k for k, digest in recorded.items() if k not in tensors or tensor_sha256(tensors[k]) != digest]
    if bad:
        raise ValueError(f"{path}: {len(bad)} tensor(s) differ from the checksums recorded when it was saved "
                         f"(e.g. {bad[0]}): the file is damaged or was edited; save the model again")


def _check_module(name: str, tensors: dict[str, torch.Tensor], scheme: TensorScheme) -> None:
    """Shapes, dtypes and values of one quantized module's tensors against its scheme, before unpacking:
    a wrong-shaped, integer, NaN, infinite or non-positive scale loaded silently and scaled every output."""
    def bad(msg: str):
        raise ValueError(f"quantized module {name}: {msg}")

    needed = (("weight", "weight_scale") if scheme.format == "fp8e4m3" else
              ("weight_packed", "weight_shape", "weight_scale") + (() if scheme.symmetric else ("weight_zero_point",)))
    missing = [k for k in needed if k not in tensors]
    if missing:
        bad(f"missing {', '.join(missing)} (a {scheme} weight stores {', '.join(needed)})")
    if scheme.format == "fp8e4m3":
        w = tensors["weight"]
        if w.dtype != torch.float8_e4m3fn or w.dim() != 2:
            bad(f"weight must be a 2-D float8_e4m3fn tensor, got {w.dtype} {tuple(w.shape)}")
        out, inp = w.shape
    else:
        shape = tensors["weight_shape"]
        if shape.dtype.is_floating_point or shape.numel() != 2 or bool((shape <= 0).any()):
            bad(f"weight_shape must be two positive integers, got {shape.tolist()} ({shape.dtype})")
        out, inp = (int(v) for v in shape)
        packed = tensors["weight_packed"]
        expected = (out, -(-inp * scheme.bits // 32))
        if packed.dtype != torch.int32 or tuple(packed.shape) != expected:
            bad(f"weight_packed must be int32 of shape {expected} for weight_shape {[out, inp]} at {scheme.bits} "
                f"bits, got {packed.dtype} {tuple(packed.shape)}")
    scale = tensors["weight_scale"]
    want = (1,) if scheme.granularity == "tensor" else (
        out, inp // scheme.group_size if scheme.granularity == "group" else 1)
    shape_ok = scale.numel() == 1 if scheme.granularity == "tensor" else tuple(scale.shape) == want
    if not shape_ok:
        bad(f"weight_scale must have shape {want} for a {out} x {inp} weight ({scheme.granularity}), "
            f"got {tuple(scale.shape)}")
    if not scale.dtype.is_floating_point:
        bad(f"weight_scale must be floating point, got {scale.dtype}")
    s = scale.float()
    if not bool(torch.isfinite(s).all()) or not bool((s > 0).all()):
        n = int((~torch.isfinite(s) | (s <= 0)).sum())
        bad(f"weight_scale has {n} value(s) that are NaN, infinite, zero or negative (scales must be finite and > 0)")


def decompress_module(tensors: dict[str, torch.Tensor], scheme: TensorScheme) -> tuple[PackedWeight, torch.Tensor | None]:
    """Inverse of compress_module: real storage (and bias) from compressed-tensors tensors."""
    from qdrift.real.packing import pack_int4

    _, _, unpack_from_int32 = _ct()
    scale = tensors["weight_scale"].float()
    scale = (scale.reshape(1, 1) if scheme.granularity == "tensor" else scale).contiguous()
    bias = tensors.get("bias")
    if scheme.format == "fp8e4m3":
        w = tensors["weight"]
        return PackedWeight(scheme, tuple(w.shape), w, scale, None), bias
    shape = tuple(int(v) for v in tensors["weight_shape"])
    half = 1 << (scheme.bits - 1)
    signed = unpack_from_int32(tensors["weight_packed"], scheme.bits, torch.Size(shape)).to(torch.int16)
    zp = None
    if not scheme.symmetric:
        raw = tensors["weight_zero_point"]
        zp_signed = (raw.reshape(1, 1).to(torch.int16) if scheme.granularity == "tensor" else
                     unpack_from_int32(raw, scheme.bits, torch.Size(scale.shape), packed_dim=0).to(torch.int16))
        zp = (zp_signed + half).to(torch.uint8)
    if scheme.bits == 8 and scheme.symmetric:
        data = signed.to(torch.int8)  # stored as the signed codes themselves
    else:  # int4 (both) and asymmetric int8 are stored unsigned: signed code + 2^(b-1)
        data = (signed + half).to(torch.uint8)
        data = pack_int4(data) if scheme.bits == 4 else data
    return PackedWeight(scheme, shape, data, scale, zp), bias


def quantization_config(model: nn.Module) -> dict:
    """The config.json `quantization_config` of a really-quantized model."""
    q, _, _ = _ct()
    spec = real_spec_of(model)
    modules = real_modules(model)
    if spec is None or not modules:
        raise ValueError("model is not really quantized: call qdrift.real.quantize_real(model, spec) first")
    scheme = next(iter(modules.values())).scheme
    ignore = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    if any(m.source_kind == "conv1d" for m in modules.values()):
        raise ValueError("GPT-2 style Conv1D layers have no compressed-tensors layout (it stores Linear [out, in])")
    group = q.QuantizationScheme(targets=["Linear"], weights=quantization_args(scheme))
    cfg = q.QuantizationConfig(config_groups={"group_0": group}, format=FLOAT if scheme.format == "fp8e4m3" else PACKED,
                               quantization_status="compressed", ignore=ignore)
    return cfg.model_dump(mode="json")


def save_quantized(model: nn.Module, directory: str | Path) -> Path:
    """Write config.json and model.safetensors; returns the directory."""
    from safetensors.torch import save_file

    directory = Path(directory)
    qcfg = quantization_config(model)
    modules = real_modules(model)
    tensors: dict[str, torch.Tensor] = {}
    for name, m in modules.items():
        tensors.update({f"{name}.{k}": v for k, v in compress_module(m).items()})
    seen: set[int] = set()
    prefixes = tuple(f"{n}." for n in modules)
    for key, value in model.state_dict().items():
        if key.startswith(prefixes):
            continue
        if value.data_ptr() in seen:  # tied weights are stored once; load re-ties them
            continue
        seen.add(value.data_ptr())
        tensors[key] = value.detach().cpu().contiguous()
    directory.mkdir(parents=True, exist_ok=True)
    checksums = {k: tensor_sha256(v) for k, v in tensors.items()}
    save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt", CHECKSUMS: json.dumps(checksums)})
    config = model.config.to_dict()
    config["quantization_config"] = qcfg
    config["qdrift_spec"] = str(real_spec_of(model))
    (directory / "config.json").write_text(json.dumps(config, indent=2, default=str))
    return directory


def load_quantized(directory: str | Path, *, kernel: str = "auto", **from_config_kwargs) -> nn.Module:
    """Rebuild a model saved by save_quantized (or any compressed-tensors checkpoint of one int4/int8/fp8
    group) with RealQuantLinear modules. from_config_kwargs go to AutoModelForCausalLM.from_config."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    q, _, _ = _ct()
    directory = Path(directory)
    cfg = json.loads((directory / "config.json").read_text())
    qcfg = cfg.pop("quantization_config", None)
    if not qcfg or qcfg.get("quant_method") != "compressed-tensors":
        raise ValueError(f"{directory}/config.json has no compressed-tensors quantization_config")
    spec_text = cfg.pop("qdrift_spec", None)
    parsed = q.QuantizationConfig.model_validate(qcfg)
    groups = parsed.config_groups
    if len(groups) != 1:
        raise ValueError(f"only checkpoints with one config group load here, got {len(groups)}")
    group = next(iter(groups.values()))
    # Only weight quantization loads here: a checkpoint that also quantizes activations or the KV cache
    # would otherwise load as weights-only and be reported as such.
    extra = [f for f in ("input_activations", "output_activations") if getattr(group, f, None) is not None]
    if getattr(parsed, "kv_cache_scheme", None) is not None:
        extra.append("kv_cache_scheme")
    if extra:
        raise ValueError(f"{directory}/config.json quantizes more than weights ({', '.join(extra)}): only "
                         "weight-only compressed-tensors checkpoints load here")
    scheme = scheme_from_args(group.weights)
    if spec_text:
        _check_declared_spec(spec_text, scheme, directory)
    from safetensors import SafetensorError, safe_open

    weights = directory / WEIGHTS_FILE
    try:
        tensors = load_file(str(weights))
        with safe_open(str(weights), "pt") as f:
            metadata = f.metadata()
    except (SafetensorError, FileNotFoundError) as e:
        raise ValueError(f"{weights} cannot be read: {e}") from None
    _check_checksums(tensors, metadata, weights)
    quantized = sorted({k.rsplit(".", 1)[0] for k in tensors if k.endswith(".weight_scale")})
    dtype = next(v.dtype for k, v in tensors.items() if v.is_floating_point() and not k.startswith(tuple(quantized)))
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    # Parameters on the meta device, so the full-precision linears are never allocated: loading peaks
    # at the size of the checkpoint, not of the unquantized model. Buffers are built for real, as
    # transformers' own loading does: the unsaved ones (rotary inv_freq, Gemma's embed_scale) are
    # computed by the modules' constructors and appear in no checkpoint.
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, **from_config_kwargs).eval()
    for name in quantized:
        local = {k[len(name) + 1:]: tensors.pop(k) for k in list(tensors) if k.startswith(f"{name}.")}
        _check_module(name, local, scheme)
        packed, bias = decompress_module(local, scheme)
        parent, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, child, RealQuantLinear(packed, bias, kernel=kernel))
    missing, unexpected = model.load_state_dict(tensors, strict=False, assign=True)
    quantized_keys = tuple(f"{n}." for n in quantized)
    missing = [k for k in missing if not k.startswith(quantized_keys)]
    tied = set(getattr(model, "_tied_weights_keys", None) or {}) if getattr(config, "tie_word_embeddings", False) else set()
    untied = [k for k in missing if k not in tied]
    if unexpected or untied:
        raise ValueError(f"checkpoint does not fit the model: missing {untied}, unexpected {unexpected}")
    if tied:
        model.tie_weights()
    _check_loaded(model)
    setattr(model, SPEC_ATTR, QuantSpec.parse(spec_text) if spec_text else QuantSpec.uniform(weights=scheme))
    return model.eval()


def _check_declared_spec(spec_text: str, scheme: TensorScheme, directory) -> None:
    """The `qdrift_spec` a checkpoint declares must be what its quantization_config stores: the spec is
    what the model reports it runs, so a mismatch would report a precision the weights do not have.
    Clipping and the rounding seed are how the codes were chosen, which compressed-tensors does not
    record, so they are not compared."""
    from dataclasses import replace

    spec = QuantSpec.parse(spec_text)
    stored = replace(scheme, clip="absmax", seed=None)
    for phase in ("prefill", "decode"):
        declared = getattr(spec, phase).weights
        if declared is None or replace(declared, clip="absmax", seed=None) != stored:
            raise ValueError(f"{directory}/config.json declares qdrift_spec {spec_text!r}, whose {phase} weights "
                             f"({declared}) are not what its quantization_config stores ({scheme})")


def _check_loaded(model: nn.Module) -> None:
    """Every parameter and buffer holds data: none is left on the meta device."""
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"checkpoint left tensors unloaded: {left[:5]}")
