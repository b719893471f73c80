"""Which weights a model reference loads: a sha256 over its weight files, without loading it.

Why: a sweep store keys cells by the model's reference ('organism', a directory), not by its
weights, so retrained or replaced weights under the same reference would silently resume into a
store of results measured on the old ones. The sweep records this fingerprint per reference in the
store and refuses to mix (`qdrift.store.Store.check_model`). Hashing reads every weight file once
(about a second per GB, on every `run_sweep` call); tokenizer and config files are included, since they change what a run feeds.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from qdrift.models.refs import check_model_ref

# What a transformers model directory's behaviour depends on (weights, config, tokenizer, template).
SUFFIXES = (".safetensors", ".bin", ".gguf", ".json", ".jinja", ".model", ".txt")


def model_files(ref: str) -> list[Path]:
    """The files that fix what `ref` computes, sorted; [] for `tiny:<arch>` (built from code and a seed)."""
    problem = check_model_ref(ref)
    if problem:
        raise ValueError(problem)
    if ref.startswith("tiny:"):
        return []
    if ref == "smollm2":
        from qdrift.models.smollm2 import gguf_path

        return [gguf_path()]
    from qdrift.models.agents import finetune_dir, finetune_files, summary

    adapter = finetune_dir(ref)
    if adapter is not None:  # the adapter's own files, then its base's (a fine-tune is both)
        return finetune_files(adapter) + model_files(summary(adapter)["config"]["base"])
    if ref == "organism":
        from qdrift.organism import WEIGHTS

        folder = WEIGHTS
    else:
        folder = Path(ref)
    files = sorted(f for f in folder.iterdir() if f.is_file() and f.suffix in SUFFIXES)
    if not any(f.suffix in (".safetensors", ".bin", ".gguf") for f in files):
        raise FileNotFoundError(f"model '{ref}': no weight file (.safetensors, .bin or .gguf) in {folder}")
    return files


def files_fingerprint(files: list[Path]) -> str:
    """sha256 (hex) of the lines `name<TAB>sha256 of the file`, in the order given."""
    from qdrift.verify.requests import file_sha256

    return hashlib.sha256("".join(f"{f.name}\t{file_sha256(f)}\n" for f in files).encode()).hexdigest()


def model_fingerprint(ref: str) -> str:
    """`files_fingerprint` of `ref`'s files, in name order; for `tiny:<arch>` the sha256 of the
    reference itself."""
    files = model_files(ref)
    return files_fingerprint(files) if files else hashlib.sha256(ref.encode()).hexdigest()
