"""`qdrift bfcl`: a BFCL single-call category on a (quantized) model; prints json/schema/AST rates."""

from __future__ import annotations

import json
from pathlib import Path

from qdrift.cli_types import positive_int


def cmd_bfcl(args) -> int:
    import torch

    import qdrift
    from qdrift.bfcl.data import SINGLE_CALL, BFCLNotInstalled, category_stem, package_dir
    from qdrift.bfcl.shortform import rates, run_bfcl
    from qdrift.cli_agents import load_model
    from qdrift.spec import QuantSpec

    try:
        category_stem(args.category, SINGLE_CALL)
    except (ValueError, NotImplementedError) as e:
        raise SystemExit(f"qdrift: {e}") from None
    try:
        package_dir()
    except BFCLNotInstalled as e:
        raise SystemExit(f"qdrift: {e}") from None
    spec = None if args.spec in (None, "baseline") else args.spec
    if spec is not None:
        try:
            QuantSpec.parse(spec)
        except ValueError as e:
            raise SystemExit(f"qdrift: bad --spec {spec!r}: {e}") from None
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    if tokenizer is None:
        raise SystemExit(f"qdrift: model {args.model!r} has no tokenizer; BFCL needs one with a chat template")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if spec is not None:
        qdrift.quantize(model, spec, keep_original=False)
    rows = run_bfcl(model, tokenizer, args.category, args.limit, max_new_tokens=args.max_new_tokens,
                    batch=args.batch)
    for r in rows:
        r.update(model=args.model, spec=spec or "baseline")
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = rates(rows)
    print(f"BFCL {args.category}  model={args.model}  spec={spec or 'baseline'}  n={summary['n']}  "
          f"({rows[0]['tool_prompt']})")
    print(f"  json valid {summary['json_valid']:.3f}   schema valid {summary['schema_valid']:.3f}   "
          f"AST match {summary['ast_match']:.3f}")
    return 0


def add_parser(sub) -> None:
    b = sub.add_parser("bfcl", help="BFCL single-call function calling: json / schema / AST-match rates")
    b.add_argument("--model", default="organism", help="'organism', 'smollm2', 'tiny:<arch>' or a local model directory")
    b.add_argument("--spec", default="baseline", help="'baseline' (unquantized) or a quantization spec")
    b.add_argument("--category", default="simple", help="BFCL category: simple, multiple, parallel, "
                   "parallel_multiple, live_simple, live_multiple, live_parallel, live_parallel_multiple")
    b.add_argument("--limit", type=positive_int, default=None, help="the first N items (default: all)")
    b.add_argument("--max-new-tokens", type=int, default=128)
    b.add_argument("--batch", type=positive_int, default=8)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--out", help="write every item row here (JSON lines)")
    b.set_defaults(func=cmd_bfcl)
