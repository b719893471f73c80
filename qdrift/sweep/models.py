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

    def __init__(self, dtype: str | None = None, device: str | None = None):
        self.dtype, self.device = dtype, device
        self._base: dict[str, tuple] = {}
        self._variant: tuple[tuple[str, str], object] | None = None

    def base(self, ref: str):
        if ref not in self._base:
            import torch

            if self.device and self.device.startswith("cuda") and not torch.cuda.is_available():
                raise RuntimeError(f"the sweep asks for device {self.device!r} but torch sees no CUDA device "
                                   f"(torch {torch.__version__}); drop 'device:' to run on the CPU")
            model, tokenizer = load_model_ref(ref, dtype=getattr(torch, self.dtype) if self.dtype else None)
            if self.device:
                model.to(self.device)
            self._base[ref] = (model, tokenizer)
        return self._base[ref]

    def get(self, ref: str, spec: str, calibration=None):
        """(model, tokenizer) of `ref` quantized by `spec` ('baseline': the unquantized model);
        `calibration` (a `qdrift.sweep.calibration.Calibration`) for a spec with static scales."""
        base, tokenizer = self.base(ref)
        if spec == "baseline":
            return base, tokenizer
        if self._variant is None or self._variant[0] != (ref, spec, calibration):
            import qdrift

            self._variant = None  # free the previous copy before making the next
            batches = calibration.batches(tokenizer) if calibration is not None else None
            model = qdrift.quantize(copy.deepcopy(base), spec, keep_original=False, calibration=batches)
            self._variant = ((ref, spec, calibration), model)
        return self._variant[1], tokenizer
