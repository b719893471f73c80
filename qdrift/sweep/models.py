"""Model references in a sweep and the cache that loads each base model once per process.

A reference is 'organism' (the shipped model organism), 'tiny:<arch>' (a random tiny model with
the byte-level tool-calling tokenizer, for tests) or a local transformers model directory.
"""

from __future__ import annotations

import copy
from pathlib import Path


def check_model_ref(ref: str) -> str | None:
    """None if `ref` names a loadable model, else a message naming the valid choices."""
    if ref == "organism":
        return None
    if ref.startswith("tiny:"):
        from qdrift.tiny import architectures

        arch = ref.split(":", 1)[1]
        archs = architectures()
        return None if arch in archs else f"unknown tiny architecture '{arch}' in '{ref}'; valid: " + \
            ", ".join(f"tiny:{a}" for a in archs)
    if Path(ref).is_dir():
        return None
    return (f"model '{ref}' is not 'organism', 'tiny:<arch>' (e.g. tiny:llama) or an existing local model "
            f"directory (relative paths are taken from the current directory, {Path.cwd()})")


def load_model(ref: str):
    """(model, tokenizer) for a checked reference, the model in eval mode."""
    problem = check_model_ref(ref)
    if problem:
        raise ValueError(problem)
    if ref.startswith("tiny:"):
        from qdrift.tiny import tiny_model, tiny_tokenizer

        return tiny_model(ref.split(":", 1)[1]), tiny_tokenizer()
    from qdrift.organism import WEIGHTS, load_organism

    return load_organism(WEIGHTS if ref == "organism" else ref)


class ModelCache:
    """Base models loaded once per reference; the quantized variant of the current (model, spec) kept.

    Cells run grouped by model and spec, so one quantized copy at a time suffices: a new
    (model, spec) pair replaces it. The base model is never modified (quantize works on a deep copy).
    """

    def __init__(self):
        self._base: dict[str, tuple] = {}
        self._variant: tuple[tuple[str, str], object] | None = None

    def base(self, ref: str):
        if ref not in self._base:
            self._base[ref] = load_model(ref)
        return self._base[ref]

    def get(self, ref: str, spec: str):
        """(model, tokenizer) of `ref` quantized by `spec` ('baseline': the unquantized model)."""
        base, tokenizer = self.base(ref)
        if spec == "baseline":
            return base, tokenizer
        if self._variant is None or self._variant[0] != (ref, spec):
            import qdrift

            self._variant = None  # free the previous copy before making the next
            self._variant = ((ref, spec), qdrift.quantize(copy.deepcopy(base), spec, keep_original=False))
        return self._variant[1], tokenizer
