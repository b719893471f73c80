"""The execution path a result was computed on, carried by every parity result.

Simulation and real kernels can disagree (accumulator precision, activation casts a kernel makes
that the spec does not name), so a number without its path cannot be compared with another.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass

import torch
from torch import nn

PATHS = ("fake", "real")


@dataclass(frozen=True)
class ExecutionPath:
    path: str  # "fake" (quantize-dequantize in PyTorch) or "real" (stored codes, real kernels)
    backend: str  # kernel(s) the quantized linears ran: "fake-quant", "dequant-matmul", ...
    device: str  # "cpu", "cuda:0 (NVIDIA H100, sm90)"
    dtype: str  # activation dtype of the model, e.g. "bfloat16"
    tp_size: int = 1  # tensor-parallel degree (1: one device; qdrift runs no tensor parallelism)

    def __post_init__(self):
        if self.path not in PATHS:
            raise ValueError(f"path: unknown path {self.path!r}. Valid: {', '.join(PATHS)}")
        if not (isinstance(self.tp_size, int) and self.tp_size >= 1):
            raise ValueError(f"tp_size: must be a positive integer, got {self.tp_size!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.path} | {self.backend} | {self.device} | {self.dtype} | tp={self.tp_size}"


def describe_device(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"{device} ({torch.cuda.get_device_name(device)}, sm{major}{minor})"


def backends_text(names: list[str]) -> str:
    """One kernel name, or 'a x3, b x1' when the layers ran different kernels."""
    counts = Counter(names)
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} x{n}" for name, n in counts.most_common())


def path_of(model: nn.Module) -> ExecutionPath:
    """The path of a model's last forward: real when it holds RealQuantLinear modules, else fake."""
    from qdrift.real.linear import RealQuantLinear

    param = next(model.parameters())
    device, dtype = describe_device(param.device), str(param.dtype).removeprefix("torch.")
    real = [m for m in model.modules() if isinstance(m, RealQuantLinear)]
    if not real:
        return ExecutionPath("fake", "fake-quant", device, dtype)
    ran = [m.last_backend for m in real]
    if any(b is None for b in ran):
        raise RuntimeError("the real-quantized model has not run a forward yet: its kernels are not known")
    return ExecutionPath("real", backends_text(ran), device, dtype)
