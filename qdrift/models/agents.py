"""Fine-tuned models by short name: a LoRA adapter (qdrift.finetune) merged onto its base model.

A fine-tune's directory holds peft's adapter (`adapter_model.safetensors`, `adapter_config.json`)
and `finetune.json` (its configuration, the base model's fingerprint, the training summary). The
adapters qdrift ships live in `qdrift/models/agents/<name>/` with their model card and `card.json`
and load by name (`smollm2-agent`); any other fine-tune's directory loads by path.

Loading checks that the installed base is the one the adapter was trained on (its weight-file
fingerprint), merges the adapter (peft `merge_and_unload`) so that the result is a plain
transformers model that `qdrift.quantize` and every runner take as they take any model, and tells
the tokenizer which tool-call format the model was trained to write (`qdrift_tool_prompt`, read by
`qdrift.envs.prompting.tool_prompt_for`), so an evaluation prompts it as it was trained.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

SUMMARY = "finetune.json"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", SUMMARY)


def shipped() -> dict[str, Path]:
    """Short name -> directory of every fine-tune shipped with qdrift."""
    root = Path(str(resources.files("qdrift.models").joinpath("agents")))
    return {d.name: d for d in sorted(root.iterdir()) if d.is_dir() and (d / SUMMARY).is_file()} if root.is_dir() else {}


def is_finetune_dir(path: str | Path) -> bool:
    p = Path(path)
    return p.is_dir() and (p / "adapter_config.json").is_file()


def finetune_dir(ref: str) -> Path | None:
    """The directory of a shipped name or a fine-tune directory path; None if `ref` is neither."""
    found = shipped().get(ref)
    if found is not None:
        return found
    return Path(ref) if is_finetune_dir(ref) else None


def check_finetune(folder: Path) -> str | None:
    """None if `folder` holds a loadable fine-tune, else what is missing."""
    missing = [f for f in ADAPTER_FILES if not (folder / f).is_file()]
    if missing:
        return (f"fine-tune folder '{folder}' lacks {', '.join(missing)}; a fine-tune written by `qdrift finetune run` "
                "holds adapter_config.json, adapter_model.safetensors and finetune.json")
    return None


def summary(folder: Path) -> dict:
    return json.loads((folder / SUMMARY).read_text())


def load_finetune(folder: Path, dtype: Any = None) -> tuple[Any, Any]:
    """(merged model in eval mode, tokenizer) of the fine-tune in `folder`."""
    import torch

    try:
        from peft import LoraConfig, get_peft_model
    except ModuleNotFoundError:
        raise ModuleNotFoundError(f"loading the fine-tune in '{folder}' needs peft: pip install 'qdrift[finetune]'",
                                  name="peft") from None
    from qdrift.models.fingerprint import model_fingerprint
    from qdrift.models.refs import load_model_ref

    problem = check_finetune(folder)
    if problem:
        raise ValueError(problem)
    info = summary(folder)
    cfg = info["config"]
    base_ref = cfg["base"]
    want = info.get("base_fingerprint")
    have = model_fingerprint(base_ref)
    if want is not None and want != have:
        raise ValueError(f"the adapter in '{folder}' was trained on base '{base_ref}' with weight fingerprint "
                         f"{want[:16]}..., but the installed '{base_ref}' has {have[:16]}...; install the base it "
                         "was trained on, or fine-tune again on this one")
    base, tokenizer = load_model_ref(base_ref, dtype=torch.float32)
    what = f"the adapter in '{folder}' does not fit base '{base_ref}'"
    try:
        model = get_peft_model(base, LoraConfig.from_pretrained(str(folder)))
    except (RuntimeError, ValueError, KeyError) as e:
        raise ValueError(f"{what}: {e}") from e
    place_adapter(model, folder, what)
    model = model.merge_and_unload()
    model.eval()
    if dtype is not None and dtype != torch.float32:
        model = model.to(dtype)
    model.config.name_or_path = str(folder.name)
    tokenizer.qdrift_tool_prompt = {"mode": cfg.get("prompt_mode", "auto"), "parser": cfg.get("parser")}
    return model, tokenizer


def place_adapter(peft_model, folder: Path, what: str) -> None:
    """Load `folder`'s adapter tensors into `peft_model` (peft's `set_peft_model_state_dict`), refusing a
    partial fit with `what` as the reason: peft only warns about tensors that have no place in the
    model and leaves LoRA layers without a stored tensor at their initialisation."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    try:
        result = set_peft_model_state_dict(peft_model, load_file(str(folder / "adapter_model.safetensors")))
    except RuntimeError as e:  # a tensor of another shape
        raise ValueError(f"{what}: {e}") from e
    untrained = [k for k in result.missing_keys if "lora_" in k]
    if result.unexpected_keys or untrained:
        example = (list(result.unexpected_keys) or untrained)[0]
        raise ValueError(f"{what}: {len(result.unexpected_keys)} adapter tensors have no place in it and "
                         f"{len(untrained)} of its LoRA tensors have none stored (e.g. {example})")


def finetune_files(folder: Path) -> list[Path]:
    """The files that fix what the adapter adds (the base's files are its own reference's)."""
    return sorted(folder / f for f in ADAPTER_FILES)
