"""qdrift.stats end to end on a large synthetic run: the time each analysis takes.

The default is 100,000 episodes per (configuration, horizon) cell, 5 configurations x 6 horizons
(3 million episode rows); `--episodes N` scales the cell size down. Per-step first errors are
geometric with a mild rise in the hazard for the quantized configs, over 2 envs x 500 seeds
(the clusters). `python bench/stats.py --episodes 20000`
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from qdrift.stats.compounding import compounding_test
from qdrift.stats.hazard import cox, hazard_test, kaplan_meier, logrank
from qdrift.stats.horizon import half_horizon, step_error_ratio, success_by_horizon

CONFIGS = {"baseline": 0.010, "w8": 0.011, "w4g128": 0.015, "w4": 0.022, "w3": 0.035}
HORIZONS = (4, 8, 16, 32, 64, 128)


def synthetic(episodes: int, seed: int = 0) -> pd.DataFrame:
    """Columns as the agent runner writes them, built vectorised (no per-row dicts)."""
    rng = np.random.default_rng(seed)
    parts = []
    for config, p in CONFIGS.items():
        rise = 0.0 if config == "baseline" else 0.15
        steps = np.arange(max(HORIZONS))
        haz = np.clip(p * (1 + steps) ** rise, 0, 1)
        cum = 1 - np.cumprod(1 - haz)  # P(first error by step s), inverted with one uniform per episode
        for h in HORIZONS:
            u = rng.random(episodes)
            first = np.searchsorted(cum, u).astype(float)
            err = first < h
            seed_ = rng.integers(0, 500, episodes)
            parts.append(pd.DataFrame({
                "episode": np.arange(episodes) + len(parts) * episodes, "env": np.where(seed_ % 2, "ledger", "inbox"),
                "horizon": h, "seed": seed_, "trial": np.arange(episodes) // 1000, "success": ~err, "steps": h,
                "first_error_step": np.where(err, first, np.nan), "stop_reason": "done", "config": config}))
    return pd.concat(parts, ignore_index=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=100_000, help="episodes per (config, horizon) cell")
    p.add_argument("--n-boot", type=int, default=1000)
    args = p.parse_args()
    t0 = time.perf_counter()
    df = synthetic(args.episodes)
    print(f"{len(df):,} episode rows ({args.episodes:,} per cell, {len(CONFIGS)} configs x {len(HORIZONS)} "
          f"horizons) built in {time.perf_counter() - t0:.2f} s")
    runs = {
        "success_by_horizon": lambda: success_by_horizon(df),
        "compounding_test (w4 vs baseline)": lambda: compounding_test(df, baseline="baseline", variant="w4"),
        f"half_horizon (n_boot={args.n_boot})": lambda: half_horizon(df, n_boot=args.n_boot),
        "step_error_ratio": lambda: step_error_ratio(df),
        "hazard_test (config:step)": lambda: hazard_test(df, interaction=True),
        "kaplan_meier": lambda: kaplan_meier(df),
        "logrank": lambda: logrank(df),
        "cox (efron)": lambda: cox(df),
    }
    total = 0.0
    for name, run in runs.items():
        t = time.perf_counter()
        res = run()
        dt = time.perf_counter() - t
        total += dt
        print(f"{name:<36} {dt:8.2f} s   ({len(res.rows)} rows)")
    print(f"{'all analyses':<36} {total:8.2f} s")


if __name__ == "__main__":
    main()
