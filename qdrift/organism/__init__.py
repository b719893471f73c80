"""The model organism: a small Llama trained by qdrift on its own environments, shipped with it.

It is the embedded default model: it installs with the package (bf16 safetensors, a few MB),
loads offline with `from_pretrained(local_path)`, and acts in the built-in environments through
its chat template with tools (Hermes `<tool_call>` format). How it was trained and what it reaches
on held-out seeds is in `weights/MODEL_CARD.md`; `python -m qdrift.organism.train` retrains it
and `python -m qdrift.organism.evaluate` re-measures it (by default on the formats it was trained on).

    model, tokenizer = load_organism()
"""

from __future__ import annotations

from pathlib import Path

WEIGHTS = Path(__file__).resolve().parent / "weights"

__all__ = ["WEIGHTS", "load_organism"]


def load_organism(path: str | Path = WEIGHTS, dtype=None):
    """(model, tokenizer) of the organism; the model in eval mode, fp32 by default (CPU-friendly).

    Its checkpoint is bf16; loading in fp32 is exact (every bf16 value is an fp32 value).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not (path / "model.safetensors").exists():
        raise FileNotFoundError(
            f"no organism weights at {path} (expected model.safetensors there); train them with "
            f"`python -m qdrift.organism.train --out {path}`"
        )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32, local_files_only=True,
                                                 attn_implementation="sdpa").eval()
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model, tokenizer
