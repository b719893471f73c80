"""What logging each cell to W&B costs, measured side by side in one run.

The same sweep (the organism on pointer chasing, baseline and int8 weights, `--horizons` on
`--seeds` held-out seeds) runs twice into fresh stores: without a sink, then with the W&B sink in
offline mode. Prints seconds per cell of each, the sink's own seconds per cell, and the ratio.
The first W&B run of a process also starts wandb's service; it is reported apart.
`python bench/wandb_sink.py [--seeds 8] [--horizons 1 4 16]`
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from qdrift.store import Store
from qdrift.sweep import parse_sweep, run_sweep
from qdrift.sweep.file import WandbOptions
from qdrift.sweep.wandb_sink import WandbSink

SWEEP = """\
name: bench-wandb
models: [organism]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: pointer_chase
    horizons: {horizons}
    seeds: {seeds}
"""


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--horizons", type=int, nargs="+", default=[1, 4, 16])
    args = p.parse_args()
    os.environ.setdefault("WANDB_SILENT", "true")
    sweep = parse_sweep(SWEEP.format(horizons=args.horizons, seeds=args.seeds))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        with Store(tmp / "warm.sqlite") as store:  # imports and first-call costs, so neither side pays them
            run_sweep(parse_sweep(SWEEP.format(horizons=[1], seeds=1)), store, progress=False)
        with Store(tmp / "plain.sqlite") as store:
            t0 = time.perf_counter()
            n = run_sweep(sweep, store, progress=False).done
            plain = (time.perf_counter() - t0) / n
        with Store(tmp / "wandb.sqlite") as store:
            sink = WandbSink(WandbOptions("qdrift-bench", mode="offline"), sweep.name, store, tmp)
            first = []

            def timed(result):
                t = time.perf_counter()
                sink(result)
                first.append(time.perf_counter() - t)

            t0 = time.perf_counter()
            run_sweep(sweep, store, progress=False, on_result=timed)
            logged = (time.perf_counter() - t0) / n
    steady = sum(first[1:]) / max(1, len(first) - 1)
    print(f"{n} cells (organism, pointer_chase L={args.horizons}, {args.seeds} seeds, baseline + w8)")
    print(f"without W&B: {plain:.2f} s/cell; with the offline W&B sink: {logged:.2f} s/cell "
          f"(ratio {logged / plain:.2f}x)")
    print(f"sink alone: first cell {first[0]:.2f} s (starts wandb's service), then {steady:.2f} s/cell")


if __name__ == "__main__":
    main()
