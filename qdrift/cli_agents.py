"""`qdrift agents`: run agent episodes with a baseline and quantized variants, then test the difference.

The main job on the embedded default (the organism): every variant is the same weights quantized
by a spec; episodes are held-out seeds; every episode row is written to `--out` (JSON lines) as it
finishes a (spec, horizon) cell, so an interrupted run keeps what it measured.

`--drift` also replays the baseline's own episodes through each variant, teacher-forced
(`qdrift.envs.drift`): per generated token the KL between the two next-token distributions and
whether their top-1 agrees, written to `NAME.drift.jsonl` beside `--out`, then summarized and
tested for growth along the trajectory (`qdrift.stats.drift_trend`). That measures drift where
both models succeed, which success rates cannot.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from qdrift.cli_types import positive_int


def load_model(ref: str):
    """(model, tokenizer) for a model reference (qdrift.models.refs), or exit naming the valid ones."""
    from qdrift.models.refs import check_model_ref, load_model_ref

    problem = check_model_ref(ref)
    if problem:
        raise SystemExit(f"qdrift: bad --model '{ref}': {problem}")
    return load_model_ref(ref)


def check_env(entry: str, horizons: list[int]) -> None:
    """Build the environment once at each horizon before any model loads, or exit naming what is wrong."""
    from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment, parse_env_entry

    try:
        name, knobs = parse_env_entry(entry)
        for L in horizons:
            make_environment(name, horizon=L, seed=TRAIN_SEEDS_BELOW, split="eval", **knobs)
    except (ValueError, TypeError, ImportError, OSError, SyntaxError) as e:
        raise SystemExit(f"qdrift: bad --env {entry!r}: {e}") from None


def cmd_agents(args) -> int:
    import torch

    import qdrift
    from qdrift import stats
    from qdrift.envs.drift import drift_rows
    from qdrift.organism.evaluate import evaluate
    from qdrift.spec import QuantSpec

    for s in args.spec:
        try:
            QuantSpec.parse(s)
        except ValueError as e:
            raise SystemExit(f"qdrift: bad --spec {s!r}: {e}") from None
    if any(h < 1 for h in args.horizons):
        raise SystemExit(f"qdrift: horizons must be >= 1, got {args.horizons}")
    if len(set(args.horizons)) != len(args.horizons):
        raise SystemExit(f"qdrift: horizons must be distinct, got {args.horizons}")
    check_env(args.env, args.horizons)
    torch.set_num_threads(args.threads)
    base, tokenizer = load_model(args.model)
    out = Path(args.out) if args.out else None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("")
    drift_out = out.with_suffix(".drift.jsonl") if (out and args.drift) else None
    if drift_out:
        drift_out.write_text("")
    rows, drift, base_runs = [], [], {}
    configs = ["baseline", *args.spec]
    for config in configs:
        model = base if config == "baseline" else qdrift.quantize(copy.deepcopy(base), config, keep_original=False)
        for i, L in enumerate(args.horizons):
            t0 = time.time()
            traces = [] if (args.drift and config == "baseline") else None
            summary, episodes, _ = evaluate(model, tokenizer, args.env, L, args.seeds, args.batch, traces=traces)
            cell = [{**e.row(), "task": args.env, "config": config} for e in episodes]  # task keeps the knobs
            rows += cell
            append_rows(out, cell)
            print(f"{config:>28}  L={L:<4} success {summary['success']:.3f}  step accuracy "
                  f"{summary['step_accuracy']:.4f}  ({summary['episodes']} episodes, {time.time() - t0:.1f} s)",
                  flush=True)
            if traces is not None:
                base_runs[i] = (traces, episodes)
            elif args.drift:
                t0 = time.time()
                # Episode ids unique over horizons (the statistics cluster on them).
                traces, base_episodes = base_runs[i]
                cell = drift_rows(base, model, traces, [e.seed for e in base_episodes], first_id=i * args.seeds,
                                  batch_size=args.batch, horizon=L, task=args.env, config=config)
                drift += cell
                append_rows(drift_out, cell)
                print(f"{'':>28}  L={L:<4} teacher-forced drift: {len(cell):,} tokens, mean KL "
                      f"{sum(r['kl'] for r in cell) / max(len(cell), 1):.3e}  ({time.time() - t0:.1f} s)", flush=True)
    # Each analysis says why it cannot run (e.g. one seed: no clusters) instead of ending the command
    # after all the episodes ran.
    _print_analysis("Success by horizon", lambda: stats.success_by_horizon(rows, "config"))
    _print_analysis("Per-step error rates", lambda: stats.step_error_ratio(rows, "config", baseline="baseline"))
    for spec in args.spec:
        _print_analysis(f"Paired comparison {spec}", lambda spec=spec: stats.paired_from_rows(
            rows, "config", "baseline", spec, item_cols=["env", "horizon", "seed", "trial"], cluster_col="seed"))
        if len(set(args.horizons)) >= 2:
            _print_analysis(f"Compounding {spec}", lambda spec=spec: stats.compounding_test(rows, "config", "baseline", spec))
        if args.drift:
            print_drift([r for r in drift if r["config"] == spec], [r for r in rows if r["config"] == spec],
                        args.horizons, args.seeds)
    if drift_out:
        print(f"teacher-forced drift rows: {drift_out}")
    return 0


def _print_analysis(title: str, analysis) -> None:
    try:
        print(analysis().summary())
    except ValueError as e:
        print(f"{title}: not computed ({e})")


def append_rows(path: Path | None, rows: list[dict]) -> None:
    if path:
        with path.open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in rows))


def print_drift(drift: list[dict], episode_rows: list[dict], horizons: list[int], seeds: int) -> None:
    """Divergence summary, its trend along the trajectory, and whether it predicts the variant's failures."""
    from qdrift import stats

    if not drift:
        print("Teacher-forced drift: no generated tokens to compare")
        return
    print(stats.divergence_summary(drift).summary())
    # The variant's episodes under the same ids as the drift rows (horizon index x seeds + episode).
    failures = [{"episode": horizons.index(r["horizon"]) * seeds + r["episode"], "success": r["success"]}
                for r in episode_rows]
    for title, analysis in (("Drift along the trajectory", lambda: stats.drift_trend(drift)),
                            ("Divergence vs task failure", lambda: stats.divergence_vs_failure(drift, failures))):
        try:
            print(analysis().summary())
        except ValueError as e:
            print(f"{title}: not tested ({e})")
    print("Note: greedy decoding leaves the baseline's path at the first top-1 flip, so flips and the variant's "
          "failures go together by construction; mean KL is the predictor that is not.")


def add_parser(sub) -> None:
    a = sub.add_parser("agents", help="agent episodes: baseline vs quantized variants, with statistics")
    a.add_argument("--model", default="organism", help="'organism' (the shipped model), 'smollm2', 'tiny:<arch>' or a local model directory")
    a.add_argument("--env", default="pointer_chase", help="environment name or path.py@Class, knobs after a colon: "
                   "ledger:echo=1,amax=50 (the organism was trained on ledger, graph_nav and file_system with echo=1)")
    a.add_argument("--horizons", nargs="+", type=int, default=[1, 16, 64])
    a.add_argument("--seeds", type=positive_int, default=20, help="held-out seeds per horizon")
    a.add_argument("--spec", nargs="+", default=["w4g128-a16-kv:fp8e4m3@unit"])
    a.add_argument("--batch", type=positive_int, default=50)
    a.add_argument("--threads", type=positive_int, default=2)
    a.add_argument("--out", help="write every episode row here (JSON lines)")
    a.add_argument("--drift", action="store_true",
                   help="also replay the baseline's episodes through each variant, teacher-forced: per-token KL and "
                        "top-1 flips, their growth along the trajectory (rows in NAME.drift.jsonl beside --out)")
    a.set_defaults(func=cmd_agents)
