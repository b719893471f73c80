"""Measure the organism (or any local model) on held-out seeds: per-step accuracy and success by horizon.

    python -m qdrift.organism.evaluate --horizons 1 4 16 64 200 --seeds 50   # the trained formats
    python -m qdrift.organism.evaluate --spec w4g128-a16-kv:16 --envs ledger:echo=1 --seeds 100

Episodes run through the ordinary runner (`qdrift.envs.runner.run_episodes` with
`qdrift.backends.hf.HFPolicy`: the chat template's native tools, greedy decoding, the KV cache
reused across steps, `--batch` episodes in lockstep). Seeds are `TRAIN_SEEDS_BELOW + i`, held out
from training. Prints one JSON line per (spec, environment, horizon) and writes them all to `--out`.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

from qdrift.envs.registry import BUILTIN, TRAIN_SEEDS_BELOW, make_environment

ENVS = tuple(BUILTIN)  # every built-in environment
# The formats the organism was trained on (MODEL_CARD.md); the other defaults are out of its distribution.
ORGANISM_ENVS = ("pointer_chase", "ledger:echo=1", "graph_nav:echo=1", "file_system:echo=1,words=1",
                 "dict_sum:vmax=1,keyspace=1000")


def summarize(episodes, steps) -> dict:
    n = len(episodes)
    first = [e.first_error_step for e in episodes if e.first_error_step is not None]
    return {
        "episodes": n,
        "success": round(sum(e.success for e in episodes) / n, 4),
        "step_accuracy": round(sum(s.correct for s in steps) / max(1, len(steps)), 5),
        "schema_valid": round(sum(s.schema_valid for s in steps) / max(1, len(steps)), 5),
        "steps": len(steps),
        "episodes_with_error": len(first),
        "mean_first_error_step": round(sum(first) / len(first), 2) if first else None,
    }


def evaluate(model, tokenizer, env_name: str, horizon: int, seeds: int, batch: int = 50,
             max_new_tokens: int = 32, traces: list | None = None) -> tuple[dict, list, list]:
    """Run `seeds` held-out episodes of `env_name` (`name` or `name:key=value,...`); (summary, episodes, steps).

    `traces`, when a list, receives each episode's token trace in episode order (for
    `qdrift.envs.drift.teacher_forced_drift`).
    """
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.envs.registry import parse_env_entry
    from qdrift.envs.runner import run_episodes

    prompt = tool_prompt_for(tokenizer)
    env_name, knobs = parse_env_entry(env_name)
    episodes, steps = [], []
    for start in range(0, seeds, batch):
        envs = [make_environment(env_name, horizon=horizon, seed=TRAIN_SEEDS_BELOW + i, split="eval", **knobs)
                for i in range(start, min(seeds, start + batch))]
        policy = HFPolicy(model, tokenizer, prompt, max_new_tokens=max_new_tokens,
                          record_tokens=traces is not None)
        e, s = run_episodes(policy, envs, first_id=start)
        if traces is not None:
            traces += [list(t) for t in policy.token_trace]
        episodes += e
        steps += s
    return summarize(episodes, steps), episodes, steps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a local model directory (default: the organism)")
    ap.add_argument("--envs", nargs="+", default=list(ORGANISM_ENVS),
                    help="environments as name or name:knob=v,...; default: the organism's trained formats "
                         f"({' '.join(ORGANISM_ENVS)}); built-ins: {', '.join(ENVS)}")
    ap.add_argument("--horizons", nargs="+", type=int, default=[1, 4, 16, 64, 200])
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--batch", type=int, default=50)
    ap.add_argument("--spec", nargs="+", default=["none"], help="quantization specs; 'none' is the baseline")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch

    import qdrift
    from qdrift.organism import WEIGHTS, load_organism

    torch.set_num_threads(args.threads)
    base, tokenizer = load_organism(args.model or WEIGHTS)
    rows = []
    for spec in args.spec:
        model = base if spec == "none" else qdrift.quantize(copy.deepcopy(base), spec, keep_original=False)
        for name in args.envs:
            for L in args.horizons:
                t0 = time.time()
                summary, _, _ = evaluate(model, tokenizer, name, L, args.seeds, args.batch)
                row = {"spec": spec, "env": name, "horizon": L, **summary, "wall_s": round(time.time() - t0, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
