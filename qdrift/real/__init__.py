"""Real quantization: packed weight storage, its kernels, parity with the fake path, checkpoints.

    from qdrift.real import quantize_real
    quantize_real(model, "w4g128-a16-kv:16")   # linears now hold int4 codes two a byte
"""

from qdrift.real.convert import quantize_real, real_modules, real_spec_of, set_kernel
from qdrift.real.linear import RealQuantLinear
from qdrift.real.path import ExecutionPath, path_of

__all__ = ["ExecutionPath", "RealQuantLinear", "path_of", "quantize_real", "real_modules", "real_spec_of",
           "set_kernel"]
