"""Resolve a `pretrained=` reference to a loaded (model, tokenizer), never touching the hub.

lm-eval passes `pretrained` as a string from the command line; qdrift adds names for the models
it ships or builds (`organism`, `smollm2`, `tiny:<arch>`) next to local directories.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUILTIN = ("organism", "smollm2", "tiny:<arch>")


def load_pretrained(ref: str, tokenizer: Any = None, dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) for `ref`: a built-in name (see BUILTIN) or a local model directory.

    `tokenizer` (an object or a local path) overrides the one that comes with `ref`.
    """
    import torch

    dtype = _dtype(dtype) or torch.float32
    if ref == "organism":
        from qdrift.organism import load_organism

        model, tok = load_organism(dtype=dtype)
    elif ref == "smollm2":
        from qdrift.models.smollm2 import load_smollm2

        model, tok = load_smollm2(dtype=dtype)
    elif ref.startswith("tiny:"):
        from qdrift.tiny import tiny_model, tiny_tokenizer

        model, tok = tiny_model(ref.split(":", 1)[1], dtype=dtype), tiny_tokenizer()
    elif Path(ref).is_dir():
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(ref, dtype=dtype, local_files_only=True).eval()
        tok = None if tokenizer is not None else AutoTokenizer.from_pretrained(ref, local_files_only=True)
    else:
        raise ValueError(
            f"pretrained={ref!r} is neither a built-in model nor a local directory. Valid built-ins: "
            f"{', '.join(BUILTIN)}; or give the path of a saved transformers model (no hub downloads)"
        )
    if isinstance(tokenizer, (str, Path)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer, local_files_only=True)
    return model, tokenizer if tokenizer is not None else tok


def _dtype(value: Any):
    import torch

    if value is None or value == "auto" or isinstance(value, torch.dtype):
        return None if value == "auto" else value
    names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if value not in names:
        raise ValueError(f"dtype={value!r} is not supported; valid choices: {', '.join(names)}, auto")
    return names[value]
