"""Fine-tuning and study costs of the fine-tuned SmolLM2 agent, measured side by side in one run.

  1. training tokens/s of a few steps of the shipped recipe (real episodes, batch 1, gradients
     accumulated): LoRA with bf16 autocast (the recipe) vs LoRA in fp32 vs full fine-tuning with
     bf16 autocast, on the same episodes;
  2. generated tokens/s and episodes/s of the fine-tuned model on one environment setting, greedy,
     at batch 1, 32 and 64, in fp32 (and bf16 where the CPU has native bf16), and from the fastest
     episodes/s the study's projected CPU hours (variants x seeds episodes at the longest horizon).

Measured on 2 CPU cores (one run, `--only train --steps 2`, the recipe's episodes of steps 1-2):
LoRA r16 with bf16 autocast 217 tokens/s; LoRA r16 in fp32 119 (0.55x); full fine-tuning with bf16
autocast 184 (0.85x, 134.5M trainable against 4.9M, and a 540 MB result against the adapter's 20 MB).
Hence the first recipe's LoRA with bf16 autocast. That machine had native bf16; on a 2-core AVX2
EPYC without it, bf16 autocast was ~23x slower than fp32 (`qdrift.finetune.train.native_bf16`), so
the second stage trained in fp32 (96 tokens/s). Part 2 has not been run yet.

    python bench/finetune.py                       # both parts, ~15 min on 2 cores
    python bench/finetune.py --only train --steps 2
    python bench/finetune.py --only episodes --model runs/smollm2-agent --env dict_sum:vmax=49 --horizon 64
"""

from __future__ import annotations

import argparse
import time

import torch


def bench_train(steps: int) -> None:
    from qdrift.finetune import load_config
    from qdrift.finetune.data import episode
    from qdrift.finetune.train import build_model

    cfg = load_config("smollm2-agent")
    rows = []
    for label, lora, bf16 in (("LoRA r16, bf16 autocast", True, True), ("LoRA r16, fp32", True, False),
                              ("full fine-tuning, bf16 autocast", False, True)):
        model, tok, prompt = build_model(cfg)
        if not lora:
            model = model.merge_and_unload()
            for p in model.parameters():
                p.requires_grad_(True)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5)
        model.train()
        tokens, seconds = 0, 0.0
        for step in range(steps + 1):  # step 0 warms up, untimed
            eps = [episode(cfg, tok, prompt, step, i) for i in range(cfg.episodes_per_step)]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            for e in eps:
                ids = torch.tensor([e.ids])
                labels = torch.tensor([[i if t else -100 for i, t in zip(e.ids, e.targets, strict=True)]])
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    logits = model(input_ids=ids).logits
                torch.nn.functional.cross_entropy(logits[0, :-1].float(), labels[0, 1:], ignore_index=-100).backward()
            opt.step()
            if step:
                seconds += time.perf_counter() - t0
                tokens += sum(len(e.ids) for e in eps)
        rows.append((label, sum(p.numel() for p in params), tokens / seconds))
        del model, opt
    base = rows[0][2]
    print(f"training, {steps} steps of {cfg.episodes_per_step} real episodes each (the same episodes per setup):")
    for label, n, tps in rows:
        print(f"  {label:34s} {n / 1e6:7.1f}M trainable  {tps:6.0f} tokens/s  ({tps / base:.2f}x the recipe)")


def bench_episodes(model_ref: str, env: str, horizon: int, batches: list[int], variants: int,
                   study_seeds: int) -> None:
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.envs.registry import DEV_SEEDS_FROM, make_environment, parse_env_entry
    from qdrift.envs.runner import run_episodes
    from qdrift.models.refs import load_model_ref

    name, knobs = parse_env_entry(env)
    print(f"episodes: {model_ref}, {env}, L = {horizon}, greedy, calibration seeds (never the held-out ones)")
    from qdrift.finetune.train import native_bf16

    dtypes = [torch.float32]
    if native_bf16():
        dtypes.append(torch.bfloat16)
    else:
        print(f"  bfloat16 skipped: this CPU ({torch.backends.cpu.get_cpu_capability()}) has no native bf16")
    for dtype in dtypes:
        model, tok = load_model_ref(model_ref, dtype=dtype)
        prompt = tool_prompt_for(tok)
        results = {}
        for n in batches:
            envs = [make_environment(name, horizon=horizon, seed=DEV_SEEDS_FROM + i, split="train", **knobs)
                    for i in range(n)]
            policy = HFPolicy(model, tok, prompt, max_new_tokens=64)
            t0 = time.perf_counter()
            eps, steps = run_episodes(policy, envs)
            dt = time.perf_counter() - t0
            gen = sum(s.tokens_out for s in steps)
            acc = sum(s.correct for s in steps) / len(steps)
            results[n] = (n / dt, gen / dt)
            print(f"  {str(dtype)[6:]:8s} batch {n:3d}: {gen / dt:6.1f} generated tokens/s, {n / dt:.4f} episodes/s "
                  f"({dt:.0f} s; per-step accuracy {acc:.3f})")
        first, best = batches[0], max(results, key=lambda b: results[b][0])
        for b in batches[1:]:
            print(f"  {str(dtype)[6:]}: batch {b} vs {first}: {results[b][1] / results[first][1]:.1f}x generated tokens/s")
        print(f"  {str(dtype)[6:]}: study of {variants} variants x {study_seeds} seeds at L = {horizon}: "
              f"{variants * study_seeds / results[best][0] / 3600:.1f} CPU hours at batch {best} (the fastest here)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["train", "episodes"])
    ap.add_argument("--steps", type=int, default=3, help="timed training steps per setup")
    ap.add_argument("--model", default="smollm2-agent")
    ap.add_argument("--env", default="dict_sum:vmax=49")
    ap.add_argument("--horizon", type=int, default=64)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 32, 64],
                    help="batch sizes to time, the first the reference (each runs that many episodes)")
    ap.add_argument("--variants", type=int, default=9, help="study cells to project")
    ap.add_argument("--study-seeds", type=int, default=200)
    args = ap.parse_args()
    if args.only in (None, "train"):
        bench_train(args.steps)
    if args.only in (None, "episodes"):
        bench_episodes(args.model, args.env, args.horizon, args.batches, args.variants, args.study_seeds)


if __name__ == "__main__":
    main()
