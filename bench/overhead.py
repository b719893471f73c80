"""Cost of fake quantization, measured side by side with the unquantized model in one run.

Three ratios (targets from the project's quantization-core goals):
  1. forward time, weight-only int4 g128 / baseline                          target <= 1.05
  2. 256-token generation, FP8 KV cache / baseline (and transformers' own
     FP8 quantized cache beside it)                                        target <= 1.15
  3. one decode step with KV quantization at context 512 vs 4096, each over the
     baseline at the same context: equal ratios mean the cache is not
     re-quantized per step (the cost does not grow with context)

Runs alternate between variants so that machine noise hits them alike; medians are reported.
`python bench/overhead.py` (CPU, small model) or `bench/gpu` (CUDA, bf16, ~1B parameters).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM, QuantizedCache

import qdrift

SIZES = {
    # hidden, intermediate, layers, heads, kv heads
    "small": (512, 1536, 4, 8, 4),
    "1b": (2048, 8192, 16, 32, 8),
}


def build(size: str, device: str, dtype: torch.dtype) -> LlamaForCausalLM:
    h, i, n, heads, kv = SIZES[size]
    config = LlamaConfig(vocab_size=32000, hidden_size=h, intermediate_size=i, num_hidden_layers=n,
                         num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=8192)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()
    return model


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def alternate(fns: dict, repeats: int, device: str) -> dict[str, float]:
    """Median wall time of each function, run in alternation after one warm-up each."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            times[k].append(timed(fn, device))
    return {k: statistics.median(v) for k, v in times.items()}


def bench_forward(args, device, dtype) -> None:
    base = build(args.size, device, dtype)
    quant = qdrift.quantize(build(args.size, device, dtype), "w4g128-a16-kv:16")
    ids = torch.randint(0, 32000, (args.batch, args.seq), device=device)
    with torch.no_grad():
        t = alternate({"base": lambda: base(ids), "w4g128": lambda: quant(ids)}, args.repeats, device)
    print(f"1. forward [{args.batch}x{args.seq}]: baseline {t['base'] * 1e3:.1f} ms, w4g128 {t['w4g128'] * 1e3:.1f} ms, "
          f"ratio {t['w4g128'] / t['base']:.3f} (target <= 1.05)")


def bench_generate(args, device, dtype) -> None:
    base = build(args.size, device, dtype)
    quant = qdrift.quantize(build(args.size, device, dtype), "w16-a16-kv:fp8e4m3@unit")
    ids = torch.randint(0, 32000, (1, 16), device=device)
    kw = dict(max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens, do_sample=False)
    fns = {
        "base": lambda: base.generate(ids, **kw),
        "qdrift_fp8": lambda: quant.generate(ids, **kw),
        "hf_fp8": lambda: base.generate(ids, cache=QuantizedCache(backend="fp8", config=base.config), **kw),
    }
    with torch.no_grad():
        t = alternate(fns, max(1, args.repeats // 3), device)
    print(f"2. generate {args.new_tokens} tokens: baseline {t['base']:.2f} s, qdrift FP8 KV {t['qdrift_fp8']:.2f} s "
          f"(ratio {t['qdrift_fp8'] / t['base']:.3f}, target <= 1.15), transformers' FP8 QuantizedCache "
          f"{t['hf_fp8']:.2f} s (ratio {t['hf_fp8'] / t['base']:.3f})")


# Ops that launch no kernel (views, allocation, metadata), left out of the op count below.
NO_KERNEL = {"aten::view", "aten::reshape", "aten::transpose", "aten::slice", "aten::unsqueeze", "aten::squeeze",
             "aten::as_strided", "aten::t", "aten::expand", "aten::select", "aten::narrow", "aten::_unsafe_view",
             "aten::detach", "aten::alias", "aten::split", "aten::chunk", "aten::contiguous", "aten::permute",
             "aten::resolve_conj", "aten::resolve_neg", "aten::result_type", "aten::size", "aten::empty",
             "aten::empty_like", "aten::empty_strided", "aten::lift_fresh"}


def ops_per_step(model, cache, tok) -> int:
    """Tensor ops called from Python in one decode step, views excluded: on a GPU each launches at
    least one kernel, and eager decoding of a small batch is bound by launches, not arithmetic."""
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        model(tok, cache=cache, use_cache=True)
    cache.crop(-1)
    return sum(1 for e in prof.events() if e.name.startswith("aten::") and e.name not in NO_KERNEL
               and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")))


def bench_decode_vs_context(args, device, dtype) -> None:
    base = build(args.size, device, dtype)
    quant = qdrift.quantize(build(args.size, device, dtype), "w16-a16-kv:fp8e4m3@unit")
    ratios = {}
    ids = torch.randint(0, 32000, (1, 64), device=device)
    with torch.no_grad():
        ops = {k: ops_per_step(m, m(ids, use_cache=True).cache, ids[:, -1:]) for k, m in (("base", base),
                                                                                           ("quant", quant))}
    layers = base.config.num_hidden_layers
    print(f"3. tensor ops per decode step (each a kernel launch on a GPU): baseline {ops['base']}, FP8 KV "
          f"{ops['quant']} (+{(ops['quant'] - ops['base']) / layers:.1f} per layer, ratio {ops['quant'] / ops['base']:.3f})")
    for ctx in (512, 4096):
        ids = torch.randint(0, 32000, (1, ctx), device=device)
        tok = ids[:, -1:]
        with torch.no_grad():
            caches = {"base": base(ids, use_cache=True).cache, "quant": quant(ids, use_cache=True).cache}

            def step(model, cache, tok=tok):
                def run():
                    model(tok, cache=cache, use_cache=True)
                    cache.crop(-1)  # keep the context fixed across repeats
                return run

            fns = {"base": step(base, caches["base"]), "quant": step(quant, caches["quant"])}
            t = alternate(fns, args.repeats, device)
        ratios[ctx] = t["quant"] / t["base"]
        print(f"3. decode step at context {ctx}: baseline {t['base'] * 1e3:.2f} ms, FP8 KV {t['quant'] * 1e3:.2f} ms, "
              f"ratio {ratios[ctx]:.3f}")
    print(f"   ratio at 4096 / ratio at 512 = {ratios[4096] / ratios[512]:.3f} "
          "(~1: KV quantization cost does not grow with context)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default=None, choices=["float32", "bfloat16"])
    p.add_argument("--size", default="small", choices=list(SIZES))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--only", choices=["forward", "generate", "decode"], default=None)
    args = p.parse_args()
    dtype = getattr(torch, args.dtype) if args.dtype else (torch.bfloat16 if args.device == "cuda" else torch.float32)
    print(f"device {args.device}, dtype {dtype}, model {args.size}, torch {torch.__version__}")
    for name, fn in (("forward", bench_forward), ("generate", bench_generate), ("decode", bench_decode_vs_context)):
        if args.only in (None, name):
            fn(args, args.device, dtype)


if __name__ == "__main__":
    main()
