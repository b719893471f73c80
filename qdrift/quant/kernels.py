"""Which execution paths a spec can take on a device.

The fake path (quantize-dequantize in PyTorch) runs every format on every device. A real path
uses low-precision kernels, which exist only on some hardware: FP8 matmuls need compute
capability 8.9 or newer (Ada, Hopper). Asking for one where it cannot run is an error naming
the device and the alternatives, never a silent switch to simulation.
"""

from __future__ import annotations

from qdrift.spec import QuantSpec

PATHS = ("fake", "real")
FP8_MIN_CAPABILITY = (8, 9)


def _fp8_roles(spec: QuantSpec) -> list[str]:
    roles = []
    for phase in ("prefill", "decode"):
        for role in ("weights", "activations"):
            s = getattr(getattr(spec, phase), role)
            if s is not None and s.format.startswith("fp8"):
                roles.append(f"{phase} {role}")
    return roles


def check_path(spec: QuantSpec, path: str, device_type: str, capability: tuple[int, int] | None = None) -> None:
    """Raise unless `spec` can run on `path` on this device (capability: CUDA (major, minor)).

    The real path itself (packed storage, which specs it can store) is qdrift.real's; this checks
    only what the hardware must offer.
    """
    if path not in PATHS:
        raise ValueError(f"Unknown execution path '{path}'. Valid: {', '.join(PATHS)}")
    if path == "fake":
        return
    fp8 = _fp8_roles(spec)
    if fp8 and device_type != "cuda":
        raise ValueError(
            f"real FP8 kernels for {', '.join(fp8)} need a CUDA device with compute capability >= 8.9; "
            f"this model is on '{device_type}'. Use path='fake' to simulate FP8 numerics"
        )
    if fp8 and capability is not None and tuple(capability) < FP8_MIN_CAPABILITY:
        raise ValueError(
            f"real FP8 kernels for {', '.join(fp8)} need compute capability >= 8.9 (Ada/Hopper); "
            f"this GPU has {capability[0]}.{capability[1]}. Use path='fake' to simulate FP8, or an int format"
        )
