"""qdrift: how serving-time quantization degrades language models, step after step.

Heavy parts load lazily, so `import qdrift.spec` or `import qdrift.stats` needs no torch.
"""

from importlib import import_module

from qdrift import quiet

__version__ = "0.1.0"
quiet.install()

_LAZY = {
    "quantize": "qdrift.quant",
    "restore": "qdrift.quant",
    "spec_of": "qdrift.quant",
    "QuantSpec": "qdrift.spec",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'qdrift' has no attribute '{name}'")


__all__ = sorted(_LAZY)
