"""`qdrift lmeval ...`: lm-eval's own command line, with the `qdrift` model registered first.

lm-eval 0.4 looks models up in a registry filled by its own modules; it has no entry-point group
or other hook through which an installed package could add one, so `lm_eval --model qdrift` cannot
find qdrift's model. This command imports `qdrift.lmeval` (which registers it), takes the same
arguments as `lm_eval`, and, for `--model qdrift`, adds the spec's tag to `--use_cache` so cached
answers of two specs never mix (lm-eval keys them by request only). Everything else is lm-eval's.

    qdrift lmeval --model qdrift --model_args pretrained=organism,spec=w4g32-a16-kv:16 \
        --include_path evals/organism --tasks organism_keys_mc --limit 10
"""

from __future__ import annotations

import argparse
import sys


def add_parser(sub) -> None:
    p = sub.add_parser("lmeval", help="lm-eval's CLI with the qdrift model registered (--model qdrift)",
                       add_help=False)
    p.add_argument("lm_eval_args", nargs=argparse.REMAINDER, help="arguments for lm_eval (see `qdrift lmeval -h`)")
    p.set_defaults(func=lambda a: run(a.lm_eval_args))


def run(argv: list[str]) -> int:
    try:
        from lm_eval._cli import HarnessCLI
        from lm_eval.utils import setup_logging

        import qdrift.lmeval  # noqa: F401  (registers the model)
    except ModuleNotFoundError as e:
        raise SystemExit(f"qdrift lmeval needs lm-eval ({e}); install it with: pip install 'qdrift[lmeval]'") from None
    setup_logging()
    cli = HarnessCLI()
    saved, sys.argv = sys.argv, ["lm-eval", *argv]  # lm-eval's parser reads sys.argv
    try:
        args = cli.parse_args()
    finally:
        sys.argv = saved
    if getattr(args, "model", None) == "qdrift" and getattr(args, "use_cache", None):
        args.use_cache = _tag(args.use_cache, args.model_args or {})
    try:
        cli.execute(args)
    except ValueError as e:  # qdrift's own refusals (a bad spec, an unknown model argument) read as errors
        if getattr(args, "model", None) != "qdrift":
            raise
        raise SystemExit(f"qdrift lmeval: {e}") from None
    return 0


def _tag(use_cache: str, model_args: dict) -> str:
    from qdrift.lmeval.cache import tagged_cache_path
    from qdrift.lmeval.model import NOOP
    from qdrift.spec import QuantSpec

    spec = QuantSpec.parse(str(model_args.get("spec") or NOOP))
    name = str(model_args.get("name") or model_args.get("pretrained") or "organism")
    return tagged_cache_path(use_cache, name, spec.hash)
