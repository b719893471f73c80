"""The fine-tuning loop: LoRA through peft, bf16 autocast, resumable from checkpoints.

A run lives in one directory. `checkpoint.pt` (written atomically every `checkpoint_every_s`
seconds and at the end) holds the adapter, the optimiser state, the step and the RNG state; the
data a step trains on is a pure function of (seed, step) (qdrift.finetune.data), and the learning
rate a pure function of the step, so `kill -9` at any moment and a rerun of the same command
continues to the same weights an uninterrupted run reaches. `train_log.jsonl` gets one line per
step (rewound to the checkpoint on resume). The result is peft's adapter (`adapter_model.safetensors`,
`adapter_config.json`) and `finetune.json` (configuration, steps, tokens, wall time, machine).

Episodes are trained one at a time (batch 1, no padding) and their gradients accumulated over a
step; the loss is the mean over the step's target tokens.
"""

from __future__ import annotations

import json
import math
import os
import platform
import time
import warnings
from pathlib import Path

import torch

from qdrift.finetune.config import FinetuneConfig

CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"
SUMMARY = "finetune.json"
CONFIG = "config.json"


class ConfigMismatch(ValueError):
    """A run directory holds a run of another configuration."""


def lr_at(cfg: FinetuneConfig, step: int) -> float:
    """Linear warmup, then cosine decay to 10% of the peak, by step (0-based)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    span = max(1, cfg.steps - cfg.warmup_steps)
    progress = min(1.0, (step - cfg.warmup_steps) / span)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def _check_directory(cfg: FinetuneConfig, out: Path) -> None:
    """Refuse a directory that holds a run of another configuration."""
    recorded = out / CONFIG
    if not recorded.is_file():
        return
    old = json.loads(recorded.read_text())
    if old.get("hash") != cfg.hash():
        new = cfg.to_dict()
        diff = sorted(k for k in set(old["config"]) | set(new) if k not in FinetuneConfig._UNHASHED
                      and old["config"].get(k) != new.get(k))
        detail = "; ".join(f"{k}: {old['config'].get(k)!r} there, {new.get(k)!r} now" for k in diff[:4]) or (
            f"the adapter init_from {cfg.init_from!r} names has changed since")
        raise ConfigMismatch(
            f"{out} holds a fine-tune of another configuration ({detail}); nothing there was changed. "
            "Resume it with its own configuration (config.json there), or train into a new --out directory")


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively. Without it (oneDNN needs AVX-512 BF16 or AMX) torch
    falls back to a scalar kernel: measured on a 2-core AVX2 EPYC, a LoRA forward and backward of
    1,000 SmolLM2 tokens took 254 s in bf16 against 11 s in fp32."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def bf16_autocast_problem(cfg: FinetuneConfig) -> str | None:
    """Why bf16 autocast would crawl on this CPU (`native_bf16`), or None."""
    if not cfg.autocast_bf16 or native_bf16():
        return None
    return (f"autocast_bf16 is on but this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16, "
            "where bf16 matrix products run ~20x slower than fp32; set `autocast_bf16: false` in the recipe "
            "(a different configuration, so a different run directory)")


def machine() -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _trainable(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def build_model(cfg: FinetuneConfig):
    """(peft model, tokenizer, tool prompt) with the adapter freshly initialised from `cfg.seed`."""
    from peft import LoraConfig, get_peft_model

    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.models.refs import load_model_ref

    base, tokenizer = load_model_ref(cfg.base, dtype=torch.float32)
    prompt = tool_prompt_for(tokenizer, mode=cfg.prompt_mode, parser=cfg.parser)
    torch.manual_seed(cfg.seed)
    lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules=list(cfg.lora_targets),
                      lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")
    model = get_peft_model(base, lora)
    if cfg.init_from:
        _load_adapter(model, cfg.init_from)
    if cfg.qat:
        from qdrift.finetune.qat import enable_qat

        enable_qat(model, cfg.qat)
    return model, tokenizer, prompt


def _load_adapter(model, ref: str) -> None:
    """Start from the adapter of the fine-tune `ref` (every tensor placed, or an error)."""
    from qdrift.models.agents import finetune_dir, place_adapter

    place_adapter(model, finetune_dir(ref), f"init_from {ref!r}: its adapter does not fit this model")


def _rewind_log(path: Path, step: int) -> None:
    if not path.is_file():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] < step]
    path.write_text("".join(line + "\n" for line in keep))


def finetune(cfg: FinetuneConfig, out: str | os.PathLike, *, progress: bool = True,
             stop_after: int | None = None) -> Path:
    """Train `cfg` into `out`, resuming a checkpoint there. Returns `out`.

    `stop_after` ends the call after that many optimiser steps of this call (a checkpoint is written),
    for tests and for spreading a run over several sessions.
    """
    from peft import get_peft_model_state_dict
    from tqdm.auto import tqdm

    from qdrift.finetune.data import episode

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _check_directory(cfg, out)
    if (out / SUMMARY).is_file() and not (out / CHECKPOINT).is_file():
        return out  # finished earlier: nothing to do
    (out / CONFIG).write_text(json.dumps({"hash": cfg.hash(), "config": cfg.to_dict()}, indent=1))

    slow = bf16_autocast_problem(cfg)
    if slow:
        warnings.warn(slow, stacklevel=2)
    model, tokenizer, prompt = build_model(cfg)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    state = {"step": 0, "elapsed_s": 0.0, "tokens": 0, "target_tokens": 0}
    ckpt_path = out / CHECKPOINT
    if ckpt_path.is_file():
        ckpt = torch.load(ckpt_path, map_location="cpu", weights_only=False)
        if ckpt["hash"] != cfg.hash():
            raise ConfigMismatch(f"{ckpt_path} was written by configuration {ckpt['hash']}, not {cfg.hash()}")
        named = dict(model.named_parameters())
        with torch.no_grad():
            for n, t in ckpt["trainable"].items():
                named[n].copy_(t)
        opt.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["rng"])
        state = ckpt["state"]
    _rewind_log(out / LOG, state["step"])

    def save_checkpoint() -> None:
        _atomic_save({"hash": cfg.hash(), "trainable": _trainable(model), "optimizer": opt.state_dict(),
                      "rng": torch.get_rng_state(), "state": dict(state)}, ckpt_path)

    model.train()
    start_step = state["step"]
    bar = tqdm(total=cfg.steps, initial=start_step, disable=not progress, unit="step", dynamic_ncols=True)
    last_ckpt = time.monotonic()
    log = open(out / LOG, "a")
    try:
        while state["step"] < cfg.steps:
            step = state["step"]
            t0 = time.monotonic()
            for group in opt.param_groups:
                group["lr"] = lr_at(cfg, step)
            episodes = [episode(cfg, tokenizer, prompt, step, i) for i in range(cfg.episodes_per_step)]
            n_target = sum(e.n_targets for e in episodes)
            if n_target == 0:
                longest = max(len(e.ids) for e in episodes)
                raise ValueError(f"step {step}: max_tokens={cfg.max_tokens} cuts every episode before its first call "
                                 f"(the longest is {longest} tokens); raise max_tokens or shorten the horizons")
            opt.zero_grad(set_to_none=True)
            total, per_episode = 0.0, []
            for e in episodes:
                ids = torch.tensor([e.ids])
                # a target token t is predicted by the logits at position t - 1; only those rows go
                # through the vocabulary projection (transformers' logits_to_keep): the calls are 13-16%
                # of an episode's tokens (train logs), and the 49k x 576 projection is 28M of the
                # model's 135M multiply-adds per token
                at = torch.tensor([t - 1 for t, is_target in enumerate(e.targets) if is_target and t > 0])
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.autocast_bf16):
                    logits = model(input_ids=ids, logits_to_keep=at).logits
                loss = torch.nn.functional.cross_entropy(logits[0].float(), ids[0, at + 1],
                                                         reduction="sum") / n_target
                loss.backward()
                total += float(loss.detach())
                per_episode.append(round(float(loss.detach()) * n_target / max(e.n_targets, 1), 4))
            opt.step()
            dt = time.monotonic() - t0
            tokens = sum(len(e.ids) for e in episodes)
            state.update(step=step + 1, elapsed_s=state["elapsed_s"] + dt, tokens=state["tokens"] + tokens,
                         target_tokens=state["target_tokens"] + n_target)
            log.write(json.dumps({"step": step, "loss": total, "lr": lr_at(cfg, step), "tokens": tokens,
                                  "target_tokens": n_target, "seconds": round(dt, 3),
                                  "episodes": [[e.env, e.horizon, e.seed, ep_loss]
                                               for e, ep_loss in zip(episodes, per_episode, strict=True)]}) + "\n")
            log.flush()
            bar.update(1)
            bar.set_postfix(loss=f"{total:.4f}", tok_s=f"{tokens / dt:.0f}")
            done_here = state["step"] - start_step
            if (time.monotonic() - last_ckpt >= cfg.checkpoint_every_s or state["step"] == cfg.steps
                    or (stop_after is not None and done_here >= stop_after)):
                save_checkpoint()
                last_ckpt = time.monotonic()
            if stop_after is not None and done_here >= stop_after and state["step"] < cfg.steps:
                return out
    finally:
        log.close()
        bar.close()

    model.save_pretrained(out, state_dict=get_peft_model_state_dict(model), safe_serialization=True)
    (out / "README.md").unlink(missing_ok=True)  # peft's blank model-card template; qdrift writes its own
    summary = {"config": cfg.to_dict(), "hash": cfg.hash(), "steps": state["step"], "tokens": state["tokens"],
               "target_tokens": state["target_tokens"], "train_seconds": round(state["elapsed_s"], 1),
               "tokens_per_second": round(state["tokens"] / max(state["elapsed_s"], 1e-9), 1),
               "machine": machine()}
    from qdrift.models.fingerprint import model_fingerprint

    summary["base_fingerprint"] = model_fingerprint(cfg.base)  # what the adapter must be loaded onto
    if cfg.init_from:  # the stage this one continues, and its own history
        from qdrift.models.agents import finetune_dir
        from qdrift.models.agents import summary as read_summary

        source = finetune_dir(cfg.init_from)
        summary["init_from"] = {"ref": cfg.init_from, "fingerprint": model_fingerprint(str(source)),
                                "summary": read_summary(source)}
    (out / SUMMARY).write_text(json.dumps(summary, indent=1))
    ckpt_path.unlink()
    return out
