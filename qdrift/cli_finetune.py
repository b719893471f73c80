"""`qdrift finetune`: adapt a pretrained model to the environments (run), and measure it (card).

    qdrift finetune run smollm2-agent --out runs/smollm2-agent     # a shipped recipe or a YAML file
    qdrift finetune run smollm2-agent --out runs/smollm2-agent     # after a kill: resumes, same result
    qdrift finetune card runs/smollm2-agent --settings card.yaml --out runs/smollm2-agent

`run` trains with checkpoints every few minutes (qdrift.finetune.train); rerunning the same command
resumes, and a different configuration for the same directory is refused. `card` evaluates a model
reference (a shipped name such as `smollm2-agent`, or a fine-tune's directory) on held-out seeds and
writes `card.json` and `MODEL_CARD.md` (qdrift.finetune.card).
"""

from __future__ import annotations

import sys

from qdrift.cli_types import positive_int


def add_parser(sub) -> None:
    p = sub.add_parser("finetune", help="fine-tune a pretrained model on the environments (LoRA), and write its card")
    fsub = p.add_subparsers(dest="finetune_command", metavar="SUBCOMMAND", required=True)
    r = fsub.add_parser("run", help="train (or resume) a fine-tune into --out")
    r.add_argument("config", help="a shipped recipe name (see `qdrift finetune recipes`) or a YAML file")
    r.add_argument("--out", required=True, help="the run's directory: checkpoints, log, then the adapter")
    r.add_argument("--stop-after", type=positive_int, help="stop (checkpointed) after this many steps of this call")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.set_defaults(func=cmd_run)
    lst = fsub.add_parser("recipes", help="list the shipped recipes")
    lst.set_defaults(func=cmd_recipes)
    c = fsub.add_parser("card", help="evaluate a model on held-out seeds; write card.json and MODEL_CARD.md")
    c.add_argument("model", help="a shipped fine-tune name (smollm2-agent), a fine-tune directory or any model reference")
    c.add_argument("--settings", required=True, help="YAML: seeds, batch, notes and the settings to evaluate")
    c.add_argument("--out", required=True, help="directory for card.json and MODEL_CARD.md")
    c.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    c.set_defaults(func=cmd_card)


def cmd_recipes(args) -> int:
    from qdrift.finetune.config import recipes

    print("\n".join(recipes()))
    return 0


def cmd_run(args) -> int:
    from qdrift.finetune import load_config
    from qdrift.finetune.train import ConfigMismatch, finetune

    try:
        cfg = load_config(args.config)
    except (ValueError, FileNotFoundError) as e:
        raise SystemExit(f"qdrift: bad fine-tuning config: {e}") from None
    try:
        out = finetune(cfg, args.out, progress=not args.no_progress, stop_after=args.stop_after)
    except ConfigMismatch as e:
        raise SystemExit(f"qdrift: {e}") from None
    except ModuleNotFoundError as e:  # a base model whose package is missing says how to install it
        raise SystemExit(f"qdrift: {e}") from None
    done = (out / "finetune.json").is_file()
    print(f"{'finished' if done else 'checkpointed'}: {out}", file=sys.stderr)
    return 0


def cmd_card(args) -> int:
    import torch

    from qdrift.finetune.card import evaluate_card, load_settings, write_card
    from qdrift.models.agents import finetune_dir, summary
    from qdrift.models.refs import check_model_ref, load_model_ref

    problem = check_model_ref(args.model)
    if problem:
        raise SystemExit(f"qdrift: bad model {args.model!r}: {problem}")
    try:
        settings = load_settings(args.settings)
    except (ValueError, OSError) as e:
        raise SystemExit(f"qdrift: {e}") from None
    model, tokenizer = load_model_ref(args.model, dtype=getattr(torch, args.dtype))
    card = evaluate_card(args.model, model, tokenizer, settings, log=lambda s: print(s, file=sys.stderr))
    folder = finetune_dir(args.model)
    out = write_card(card, summary(folder) if folder else None, args.out)
    print(f"wrote {out / 'card.json'} and {out / 'MODEL_CARD.md'}", file=sys.stderr)
    return 0
