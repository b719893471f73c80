"""What a qdrift lm-eval model computes, as a short hash: the `model-<hex>` part of its cache key.

Why: lm-eval keys cached answers by the request alone, and the spec and code hashes in qdrift's cache
file names (`qdrift.lmeval.cache`) say nothing of the model itself. Two model objects of one class,
or one model in float32 and in bfloat16, would share a cache file and the second run would get the
first's answers. The key hashes everything that changes an answer:

- the weights: for a model loaded by name, `qdrift.models.fingerprint.model_fingerprint` over its
  files (weights, config, tokenizer; computable without loading, so `qdrift lmeval` can tag the path
  before lm-eval builds the model); for a model object, every parameter and buffer of its
  state_dict, full-precision originals where qdrift has quantized it, with its config and
  generation config (this reads every tensor once: about a second per GB, once per model, and only
  when a response cache is used);
- the tokenizer: an override (a local path: its files; an object: its full serialisation), or, for
  a model object, the tokenizer it runs with;
- calibrated static scales of a @static spec (what the calibration batches set);
- the options: dtype, batch size, the device type, and every lm-eval HFLM option given
  (max_length, add_bos_token, mixed_precision_dtype, ...) that differs from HFLM's default.

Where a part cannot be fingerprinted (weights dropped by `keep_original=False`, a tokenizer that can
be neither serialised nor pickled) `model_key` raises, so a cache is refused rather than guessed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import pickle
from pathlib import Path
from typing import Any

import torch

KEY_HEX = 16


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _norm(value: Any) -> Any:
    """A JSON-able form of an option value; 'bfloat16' and torch.bfloat16 read the same."""
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _norm(v) for k, v in value.items()}
    return repr(value)


def hflm_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The HFLM options in `kwargs` that differ from HFLM's defaults, normalised."""
    from lm_eval.models.huggingface import HFLM

    defaults = {p.name: p.default for p in inspect.signature(HFLM.__init__).parameters.values()}
    return {k: _norm(v) for k, v in sorted(kwargs.items()) if k not in defaults or _norm(v) != _norm(defaults[k])}


def _tensor_bytes(t: torch.Tensor, name: str) -> memoryview:
    if t.is_meta:
        raise ValueError(f"cannot fingerprint the weights: {name} is on the meta device (offloaded or not loaded)")
    t = t.detach().contiguous().cpu()
    return memoryview(t.reshape(-1).view(torch.uint8).numpy())


def weights_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of a model object's state_dict tensors (the unquantized originals where qdrift
    quantized them in place), its class, config and generation config."""
    from qdrift.quant import state_of

    state = state_of(model)
    originals: dict[int, torch.Tensor] = {}
    if state is not None:
        for mq in state.modules:
            for slot in mq.slots:
                if slot.original is None:
                    raise ValueError(
                        f"cannot fingerprint the weights: {slot.target.name}.{slot.param} was quantized with "
                        "keep_original=False, so its full-precision weights are gone; quantize with "
                        "keep_original=True (the default), or pass the unquantized model and spec=")
                originals[id(slot.live)] = slot.original
    config = model.config.to_dict() if hasattr(model, "config") else {}
    for k in ("_name_or_path", "transformers_version"):
        config.pop(k, None)
    gen = getattr(model, "generation_config", None)
    head = {"class": type(model).__name__, "config": config,
            "attn": getattr(getattr(model, "config", None), "_attn_implementation", None),
            "generation": None if gen is None else {k: v for k, v in gen.to_dict().items()
                                                    if k != "transformers_version"}}
    h = hashlib.sha256(_digest(head).encode())
    for name, t in model.state_dict(keep_vars=True).items():
        t = originals.get(id(t), t)
        h.update(f"{name}\t{t.dtype}\t{tuple(t.shape)}\n".encode())
        h.update(_tensor_bytes(t, name))
    return h.hexdigest()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """sha256 of a tokenizer: a local path's files, or an object's full serialisation (a fast
    tokenizer's JSON, else its pickle) with its special tokens, chat template and sides."""
    if isinstance(tokenizer, (str, Path)):
        return _path_fingerprint(Path(tokenizer))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        body = backend.to_str()
    else:
        try:
            body = hashlib.sha256(pickle.dumps(tokenizer)).hexdigest()
        except Exception as e:  # noqa: BLE001 (any failure means: no fingerprint)
            raise ValueError(f"cannot fingerprint the tokenizer ({type(tokenizer).__name__}): it has no "
                             f"backend_tokenizer and does not pickle ({e})") from None
    extra = {a: _norm(getattr(tokenizer, a, None)) for a in (
        "special_tokens_map", "chat_template", "padding_side", "truncation_side", "add_bos_token",
        "add_eos_token", "model_max_length", "clean_up_tokenization_spaces")}
    return _digest({"class": type(tokenizer).__name__, "body": body, **extra})


def _path_fingerprint(path: Path) -> str:
    from qdrift.models.fingerprint import SUFFIXES
    from qdrift.verify.requests import file_sha256

    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(f for f in path.iterdir() if f.is_file() and f.suffix in SUFFIXES)
    else:
        raise ValueError(f"cannot fingerprint the tokenizer {str(path)!r}: no such local file or directory "
                         "(qdrift loads tokenizers from local paths only)")
    return _digest([(f.name, file_sha256(f)) for f in files])


def static_scales_fingerprint(model: torch.nn.Module) -> str | None:
    """sha256 of the calibrated static scales of a qdrift-quantized model (activations and KV), or None
    when it has none: what a @static spec's calibration batches changed."""
    from qdrift.quant import state_of

    state = state_of(model)
    if state is None:
        return None
    quantizers = [(q.name, q) for mq in state.modules for acts in mq.acts.values() for q in acts.values()]
    quantizers += [(f"kv{i}.{j}", q) for i, layer in enumerate(state.kv) for j, q in enumerate(layer.parts())]
    h, found = hashlib.sha256(), False
    for name, q in quantizers:
        scales = getattr(q, "scales", None)
        if scales is None or not getattr(getattr(q, "scheme", None), "source", None) == "static":
            continue
        found = True
        h.update(f"{name}\n".encode())
        for part in ("scale", "zero_point", "global_scale"):
            t = getattr(scales, part, None)
            if t is not None:
                h.update(part.encode())
                h.update(_tensor_bytes(t, f"{name}.{part}"))
    return h.hexdigest() if found else None


def model_key(*, weights: str, tokenizer: str | None, static_scales: str | None, options: dict[str, Any]) -> str:
    """The first KEY_HEX hex digits of a sha256 over the parts (see the module docstring)."""
    return _digest({"weights": weights, "tokenizer": tokenizer, "static_scales": static_scales,
                    "options": options})[:KEY_HEX]


def recipe_key(pretrained: str, *, tokenizer: Any, dtype: Any, batch_size: Any, device: str, kwargs: dict,
               static_scales: str | None = None) -> str:
    """`model_key` of a model loaded by name, from its constructor arguments alone: what the model
    computes (by name) and what `qdrift lmeval` computes before lm-eval builds it (the CLI)."""
    from qdrift.lmeval.load import _dtype
    from qdrift.models.fingerprint import model_fingerprint

    return model_key(
        weights=model_fingerprint(pretrained),
        tokenizer=None if tokenizer is None else tokenizer_fingerprint(tokenizer),
        static_scales=static_scales,
        options={"dtype": _norm(_dtype(dtype) or torch.float32), "batch_size": str(batch_size),
                 "device": device, **hflm_options(kwargs)})
