"""The `qdrift` command line."""

from __future__ import annotations

import argparse
import importlib
import sys


def _load(model_ref: str, dtype: str):
    """A model reference as every command takes it (qdrift.models.refs: organism, smollm2, tiny:ARCH or
    a local folder; never the hub at run time). A local folder may come without a tokenizer."""
    import torch

    from qdrift.models.refs import check_model_ref, load_model_ref

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    problem = check_model_ref(model_ref)
    if problem:
        raise SystemExit(f"qdrift: {problem}")
    return load_model_ref(model_ref, dtype=torch_dtype, require_tokenizer=False)


def _calibration(arg: str | None, model, tok, seq_len: int = 64, n: int = 4):
    import torch

    if arg is None:
        return None
    if arg == "random":
        g = torch.Generator().manual_seed(0)
        return [torch.randint(0, model.config.get_text_config().vocab_size, (1, seq_len), generator=g) for _ in range(n)]
    if tok is None:
        raise SystemExit("qdrift: --calibration FILE needs a model with a tokenizer; use --calibration random")
    lines = [line for line in open(arg, encoding="utf-8").read().splitlines() if line.strip()]
    return [tok(line, return_tensors="pt").input_ids for line in lines]


def cmd_quantize(args) -> int:
    import torch

    from qdrift.quant import quantize
    from qdrift.quant.compare import compare_logits
    from qdrift.quant.summary import summarize
    from qdrift.spec import QuantSpec

    try:
        spec = QuantSpec.parse(args.spec)
    except ValueError as e:
        raise SystemExit(f"qdrift: bad --spec: {e}") from None
    try:
        model, tok = _load(args.model, args.dtype)
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    vocab = model.config.get_text_config().vocab_size
    prompt = torch.randint(0, vocab, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        base_logits = model(prompt).logits
        base_gen = model.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False)
    try:
        quantize(model, spec, calibration=_calibration(args.calibration, model, tok))
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    print(summarize(model).render())
    with torch.no_grad():
        logits = model(prompt).logits
        gen = model.generate(prompt, max_new_tokens=args.new_tokens, do_sample=False)
    cmp = compare_logits(base_logits, logits)
    print(
        f"prefill logits vs unquantized ({args.prompt_tokens} random tokens): KL {cmp.kl_mean:.3g} nats/token "
        f"(max {cmp.kl_max:.3g}), top-1 agreement {cmp.top1_agreement:.3f}, max |dlogit| {cmp.max_abs:.3g}"
    )
    new = gen[0, prompt.shape[1]:]
    same = int((new == base_gen[0, prompt.shape[1]:]).cumprod(0).sum())
    print(f"greedy generation with cache: {len(new)} tokens, first {same} identical to the unquantized model")
    if args.json:
        import json

        print(json.dumps({"spec": str(spec), "kl_mean": cmp.kl_mean, "top1_agreement": cmp.top1_agreement}))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qdrift",
        description="Measure how serving-time quantization degrades language models over long trajectories.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    q = sub.add_parser("quantize", help="quantize a model by path and spec; print what changed and how much")
    q.add_argument("model", help="organism, smollm2, tiny:ARCH (a built-in random tiny model) or a local model directory")
    q.add_argument("--spec", required=True, help="quantization spec, e.g. w4g128-a16-kv:fp8e4m3@unit")
    q.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    q.add_argument("--calibration", help="'random' token batches, or a text file (one sample per line)")
    q.add_argument("--prompt-tokens", type=int, default=32)
    q.add_argument("--new-tokens", type=int, default=32)
    q.add_argument("--json", action="store_true", help="also print a JSON line of the headline numbers")
    q.set_defaults(func=cmd_quantize)
    # Each command family lives in its own qdrift/cli_<name>.py; imported here so that `qdrift --help` lists them all.
    for family in ('agents', 'lmeval', 'sweep', 'replay', 'bfcl', 'serve', 'verify', 'card', 'capacity', 'real', 'paper',
                   'finetune', 'calibrate'):
        importlib.import_module(f"qdrift.cli_{family}").add_parser(sub)
    t = sub.add_parser("tiny", help="list the built-in tiny architectures")
    t.set_defaults(func=lambda a: print("\n".join(__import__("qdrift.tiny").tiny.architectures())) or 0)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["lmeval"]:  # every later argument is lm_eval's (argparse cannot pass on "--model ...")
        from qdrift.cli_lmeval import run

        return run(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return args.func(args)
    except KeyboardInterrupt:  # one line, not a traceback through torch: stores and checkpoints are atomic
        print(f"qdrift {args.command}: interrupted; what was already recorded is kept (a sweep, fine-tune or "
              "verification rerun with the same command resumes from it)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
