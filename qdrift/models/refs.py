"""Model references, one grammar for the command line, sweeps and lm-eval; never the hub.

A reference is a name qdrift ships or builds (`organism`, `smollm2`, a shipped fine-tune such as
`smollm2-agent`, `tiny:<arch>`), a fine-tune's directory (qdrift.models.agents) or a local
transformers model directory. Checking a reference imports no torch, so a sweep file can be
validated before anything heavy loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BUILTIN = ("organism", "smollm2", "tiny:<arch>")


def builtin_names() -> tuple[str, ...]:
    from qdrift.models.agents import shipped

    return (*BUILTIN[:2], *shipped(), *BUILTIN[2:])


def check_model_ref(ref: str) -> str | None:
    """None if `ref` names a loadable model, else a message naming the valid choices."""
    if ref in ("organism", "smollm2"):
        return None
    from qdrift.models.agents import check_finetune, finetune_dir

    folder = finetune_dir(ref)
    if folder is not None:
        return check_finetune(folder)
    if ref.startswith("tiny:"):
        from qdrift.tiny import architectures

        arch = ref.split(":", 1)[1]
        archs = architectures()
        return None if arch in archs else f"unknown tiny architecture '{arch}' in '{ref}'; valid: " + \
            ", ".join(f"tiny:{a}" for a in archs)
    if Path(ref).is_dir():
        folder = Path(ref)
        if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")) and any(folder.glob("*.gguf")):
            return (f"model folder '{ref}' holds only a .gguf file, which a folder reference does not load; "
                    "convert it to safetensors (as qdrift.models.smollm2 does) and point at that folder")
        return None
    return (f"model '{ref}' is not 'organism', 'smollm2', 'tiny:<arch>' (e.g. tiny:llama), a shipped fine-tune, a "
            f"fine-tune's directory or an existing local model directory (relative paths are taken from the current "
            f"directory, {Path.cwd()}); valid built-ins: {', '.join(builtin_names())}")


def load_model_ref(ref: str, dtype: Any = None, require_tokenizer: bool = True) -> tuple[Any, Any]:
    """(model, tokenizer) for a reference, the model in eval mode, fp32 unless `dtype` says otherwise.
    With `require_tokenizer=False` a local folder without a tokenizer gives None for it, for commands
    that feed the model token ids of their own."""
    problem = check_model_ref(ref)
    if problem:
        raise ValueError(problem)
    import torch

    dtype = dtype or torch.float32
    if ref == "organism":
        from qdrift.organism import load_organism

        return load_organism(dtype=dtype)
    if ref == "smollm2":
        from qdrift.models.smollm2 import load_smollm2

        return load_smollm2(dtype=dtype)
    if ref.startswith("tiny:"):
        from qdrift.tiny import tiny_model, tiny_tokenizer

        return tiny_model(ref.split(":", 1)[1], dtype=dtype).eval(), tiny_tokenizer()
    from qdrift.models.agents import finetune_dir, load_finetune

    folder = finetune_dir(ref)
    if folder is not None:
        return load_finetune(folder, dtype=dtype)
    from safetensors import SafetensorError
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=dtype, local_files_only=True).eval()
    except SafetensorError as e:  # a truncated or corrupted weights file: name it, not a Rust traceback
        files = ", ".join(sorted(p.name for p in Path(ref).glob("*.safetensors"))) or "its .safetensors files"
        raise ValueError(f"model {ref}: its weights ({files}) cannot be read: {e} (a truncated or damaged "
                         "download? fetch the files again)") from None
    try:
        return model, AutoTokenizer.from_pretrained(ref, local_files_only=True)
    except (OSError, ValueError):
        if require_tokenizer:
            raise
        return model, None
