"""Model references in a sweep and the cache that loads each base model once per process.

References are resolved by `qdrift.models.refs` ('organism', 'smollm2', 'tiny:<arch>' or a local
transformers model directory).
"""

from __future__ import annotations

import copy

from qdrift.models.refs import check_model_ref, load_model_ref

__all__ = ["ModelCache", "check_model_ref"]


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
            self._base[ref] = load_model_ref(ref)
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
