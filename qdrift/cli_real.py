"""`qdrift real-parity MODEL --spec SPEC`: simulated vs real quantization of one spec, side by side.

    qdrift real-parity tiny:llama --spec w4g128z-a16-kv:16 --dtype bfloat16 --kernel fused
"""

from __future__ import annotations


def add_parser(sub) -> None:
    p = sub.add_parser("real-parity", help="per-layer and end-to-end divergence of a spec's fake and real paths")
    p.add_argument("model", help="organism, smollm2, tiny:ARCH or a local model directory")
    p.add_argument("--spec", required=True, help="weight-only spec with a storage format, e.g. w4g128-a16-kv:16")
    p.add_argument("--kernel", default="auto", choices=["auto", "dequant", "fused"],
                   help="real-path kernels: auto (fused on CUDA where one applies), dequant, fused")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--prompt-tokens", type=int, default=32)
    p.add_argument("--top", type=int, default=10, help="layers shown, worst first")
    p.add_argument("--save", metavar="DIR", help="also save the really-quantized model (compressed-tensors layout) with its tokenizer")
    p.add_argument("--json", action="store_true", help="also print the whole report as one JSON line")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    import torch

    from qdrift.cli import _load
    from qdrift.real.parity import parity
    from qdrift.spec import QuantSpec

    try:
        spec = QuantSpec.parse(args.spec)
        model, tokenizer = _load(args.model, args.dtype)
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    model = model.to(args.device)
    vocab = model.config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (1, args.prompt_tokens), generator=torch.Generator().manual_seed(1)).to(args.device)
    try:
        report = parity(model, spec, ids, kernel=args.kernel)
    except ValueError as e:
        raise SystemExit(f"qdrift: {e}") from None
    print(report.render(top=args.top))
    if args.save:
        from qdrift.real import quantize_real
        from qdrift.real.checkpoint import save_quantized

        try:
            saved = save_quantized(quantize_real(model, spec, kernel=args.kernel), args.save)
            if tokenizer is None:
                print(f"saved: {saved} (weights and config; {args.model} has no tokenizer to save)")
            else:
                tokenizer.save_pretrained(saved)  # a serving engine loads the checkpoint with its tokenizer
                print(f"saved: {saved} (weights, config and tokenizer)")
        except ValueError as e:
            raise SystemExit(f"qdrift: {e}") from None
    if args.json:
        print(json.dumps(report.to_dict()))
    return 0
