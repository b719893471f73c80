"""Fake quantization of transformers causal LMs: weights, activations, KV cache, per phase."""

from qdrift.quant.model import quantize, reseed_rounding, restore, spec_of, state_of

__all__ = ["quantize", "reseed_rounding", "restore", "spec_of", "state_of"]
