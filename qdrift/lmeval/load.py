"""Resolve a `pretrained=` reference to a loaded (model, tokenizer), never touching the hub.

lm-eval passes `pretrained` as a string from the command line; `qdrift.models.refs` resolves it
(`organism`, `smollm2`, `tiny:<arch>` or a local directory). This adds lm-eval's own options: a
dtype given by name and a tokenizer that overrides the model's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_pretrained(ref: str, tokenizer: Any = None, dtype: Any = None) -> tuple[Any, Any]:
    """(model, tokenizer) for `ref`: a built-in name or a local model directory (qdrift.models.refs).

    `tokenizer` (an object or a local path) overrides the one that comes with `ref`.
    """
    import torch

    from qdrift.models.refs import check_model_ref, load_model_ref

    problem = check_model_ref(ref)
    if problem:
        raise ValueError(f"pretrained={ref!r}: {problem}")
    model, tok = load_model_ref(ref, dtype=_dtype(dtype) or torch.float32)
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
