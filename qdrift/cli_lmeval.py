"""`qdrift lmeval ...`: lm-eval's own command line, with the `qdrift` model registered first.

lm-eval 0.4 looks models up in a registry filled by its own modules; it has no entry-point group
or other hook through which an installed package could add one, so `lm_eval --model qdrift` cannot
find qdrift's model. This command imports `qdrift.lmeval` (which registers it), takes the same
arguments as `lm_eval`, and, for `--model qdrift`, adds the model's cache tag to `--use_cache` so
cached answers of two models, dtypes, options or specs never mix (lm-eval keys them by request only;
see `qdrift.lmeval.cache`). Everything else is lm-eval's.

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
        args.use_cache = _tag(args.use_cache, args.model_args or {}, batch_size=getattr(args, "batch_size", None),
                              max_batch_size=getattr(args, "max_batch_size", None),
                              device=getattr(args, "device", None))
    try:
        cli.execute(args)
    except ValueError as e:  # qdrift's own refusals (a bad spec, an unknown model argument) read as errors
        if getattr(args, "model", None) != "qdrift":
            raise
        raise SystemExit(f"qdrift lmeval: {e}") from None
    return 0


def _tag(use_cache: str, model_args: dict, *, batch_size=None, max_batch_size=None, device=None) -> str:
    """`use_cache` tagged with the key of the model lm-eval is about to build from these arguments.

    The key is computed from the arguments as the model computes it for a model loaded by name
    (`qdrift.lmeval.identity.recipe_key`), with lm-eval's --batch_size, --max_batch_size and --device
    merged in as lm-eval merges them; the model checks the file name against its own key, so a
    difference here is an error, never a shared cache."""
    from qdrift.lmeval.cache import cache_key, tagged_cache_path
    from qdrift.lmeval.identity import recipe_key
    from qdrift.lmeval.model import NOOP, QDRIFT_OPTIONS, _available
    from qdrift.spec import QuantSpec

    # lm-eval: cls(**model_args, **{batch_size, max_batch_size, device} without the None ones)
    merged = {**model_args, **{k: v for k, v in (("batch_size", batch_size), ("max_batch_size", max_batch_size),
                                                 ("device", device or "cuda:0")) if v is not None}}
    spec = QuantSpec.parse(str(merged.get("spec") or NOOP))
    pretrained = str(merged.get("pretrained") or "organism")
    name = str(merged.get("name") or pretrained)
    key = recipe_key(pretrained, tokenizer=merged.get("tokenizer"), dtype=merged.get("dtype"),
                     batch_size=merged.get("batch_size", 1), device=_available(merged.get("device")).type,
                     kwargs={k: v for k, v in merged.items() if k not in QDRIFT_OPTIONS})
    return tagged_cache_path(use_cache, name, cache_key(key, spec.hash))
