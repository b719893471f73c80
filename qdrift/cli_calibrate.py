"""`qdrift calibrate`: find the difficulty at which a model's baseline per-step accuracy hits a target.

    qdrift calibrate smollm2-agent --env dict_sum --knob vmax --values 9 19 49 99 199 499 999 \
        --target 0.98 --horizon 32 --seeds 16

Measured greedily on calibration seeds (qdrift.envs.calibrate: training seeds fine-tuning never
draws), never on held-out ones; prints every value measured and the one chosen, and with `--out`
writes them as JSON.
"""

from __future__ import annotations

import json
import sys

from qdrift.cli_types import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("calibrate", help="find an environment knob value where a model's per-step accuracy hits a target")
    p.add_argument("model", help="a model reference (e.g. smollm2-agent)")
    p.add_argument("--env", required=True, help="environment name or path/to/file.py@Class")
    p.add_argument("--knob", required=True, help="the knob to set (e.g. vmax)")
    p.add_argument("--values", required=True, type=int, nargs="+", help="candidate values, easiest first (one value: measure it against the target)")
    p.add_argument("--target", required=True, type=float, help="per-step accuracy to aim at, e.g. 0.98")
    p.add_argument("--horizon", required=True, type=positive_int)
    p.add_argument("--seeds", type=positive_int, default=16, help="calibration seeds per value (default 16)")
    p.add_argument("--knobs", nargs="*", default=[], metavar="K=V", help="other knobs, fixed")
    p.add_argument("--batch", type=positive_int, default=16)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--out", help="write the measurements and the choice as JSON")
    p.set_defaults(func=cmd_calibrate)


def _knobs(pairs: list[str]) -> dict:
    out = {}
    for pair in pairs:
        k, sep, v = pair.partition("=")
        if not sep or not v.lstrip("-").isdigit():
            raise SystemExit(f"qdrift: bad --knobs entry {pair!r}: expected NAME=INTEGER")
        out[k] = int(v)
    return out


def cmd_calibrate(args) -> int:
    import torch

    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.calibrate import calibrate, check_knob
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.models.refs import check_model_ref, load_model_ref

    problem = check_model_ref(args.model)
    if problem:
        raise SystemExit(f"qdrift: bad model {args.model!r}: {problem}")
    fixed = _knobs(args.knobs)
    if not 0 < args.target < 1:
        raise SystemExit(f"qdrift: --target must be a per-step accuracy in (0, 1), got {args.target}")
    try:
        check_knob(args.env, args.knob, args.values, args.horizon, fixed)
    except (ValueError, TypeError, FileNotFoundError) as e:
        raise SystemExit(f"qdrift: {e}") from None
    model, tokenizer = load_model_ref(args.model, dtype=getattr(torch, args.dtype))
    prompt = tool_prompt_for(tokenizer)
    cal = calibrate(lambda: HFPolicy(model, tokenizer, prompt, max_new_tokens=64), args.env, args.knob, args.values,
                    args.target, args.horizon, n_seeds=args.seeds, fixed=fixed, batch_size=args.batch,
                    log=lambda s: print(s, file=sys.stderr))
    print(cal.summary())
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"model": args.model, **cal.to_dict()}, f, indent=1)
    return 0
