"""RealQuantLinear: a Linear whose weight is held only as stored codes, scales and zero points.

The forward picks a kernel per (device, dtype) the first time it sees them (kernels.py) and
remembers which one ran in `last_backend`, so every result can say how it was computed.
"""

from __future__ import annotations

import torch
from torch import nn

from qdrift.real import kernels
from qdrift.real.packing import PackedWeight
from qdrift.spec import TensorScheme


class RealQuantLinear(nn.Module):
    """y = x @ W^T + b with W in real storage (see qdrift.real.packing.PackedWeight)."""

    def __init__(self, packed: PackedWeight, bias: torch.Tensor | None = None, kernel: str = "auto"):
        super().__init__()
        kernels.check_kernel(kernel)
        self.scheme: TensorScheme = packed.scheme
        self.out_features, self.in_features = packed.shape
        self.kernel = kernel
        self.source_kind = "linear"  # the module it replaced ("conv1d": GPT-2's [in, out] Conv1D)
        self.register_buffer("weight_packed", packed.data)
        self.register_buffer("weight_scale", packed.scale)
        self.register_buffer("weight_zero_point", packed.zero_point)
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.last_backend: str | None = None
        self.fallback_reason: str | None = None
        self._prepared: dict[tuple[torch.device, torch.dtype], tuple[str, str | None, kernels.Matmul]] = {}
        # A prepared kernel holds converted copies of the stored weight: new weights loaded into the
        # buffers (load_state_dict) must not be computed with the old copies.
        self.register_load_state_dict_post_hook(_forget_prepared)

    @property
    def packed(self) -> PackedWeight:
        return PackedWeight(self.scheme, (self.out_features, self.in_features), self.weight_packed,
                            self.weight_scale, self.weight_zero_point)

    def storage_bytes(self) -> int:
        """Bytes of the stored weight (codes, scales, zero points), bias excluded."""
        return self.packed.nbytes()

    def set_kernel(self, kernel: str) -> None:
        kernels.check_kernel(kernel)
        self.kernel = kernel
        self._prepared.clear()

    def _matmul(self, x: torch.Tensor) -> tuple[str, str | None, kernels.Matmul]:
        key = (x.device, x.dtype)
        if key not in self._prepared:
            name, why = kernels.choose(self.kernel, self.packed, x.device, x.dtype)
            self._prepared[key] = (name, why, kernels.prepare(name, self.packed, x.dtype))
        return self._prepared[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        name, why, matmul = self._matmul(x)
        self.last_backend, self.fallback_reason = name, why
        y = matmul(x)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def _apply(self, fn, recurse=True):
        # Moves follow the model, dtype casts do not: the codes and float32 scales are the stored
        # format (module.to(bfloat16) would otherwise cast float8 codes and round the scales).
        saved = self._buffers
        self._buffers = {}
        try:
            super()._apply(fn, recurse)
        finally:
            self._buffers = saved
        for name, buf in saved.items():
            if buf is not None:
                saved[name] = buf.to(fn(buf.new_empty(0)).device)
        self._prepared.clear()
        return self

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, scheme='{self.scheme}', "
                f"bias={self.bias is not None}, kernel={self.kernel}")


def _forget_prepared(module: RealQuantLinear, _incompatible_keys) -> None:
    """load_state_dict post-hook (a module-level function, so the module still pickles)."""
    module._prepared.clear()
