"""Real quantization on CUDA: fused-kernel matmul time and decode tokens/s, INT4 and FP8 vs BF16.

    python bench/real_quant_gpu.py                       # 1.2B and 8B-shaped random Llamas
    python bench/real_quant_gpu.py --sizes 1b --new-tokens 32   # shorter, for a tight time limit

Random weights are fine for speed. Two measurements, side by side in one run:
- kernels: one linear's matmul at decode shapes (M = 1 and 16 tokens) in CUDA-event time, bf16
  F.linear vs tinygemm int4-g128 vs torch._scaled_mm fp8 (activations cast per token);
- decode, per variant, with its weight and peak memory: `generate` tokens/s (eager transformers,
  which at batch 1 spends most of each token in Python and kernel launches, so the variants come
  out alike), and one decode step replayed as a CUDA graph (the GPU's own time per token, where
  reading fewer weight bytes shows). Both are printed so neither hides the other.
Each variant prints the backend its linears really ran (their execution record), so a dequant
fallback cannot pass as a fused run.
"""

from __future__ import annotations

import argparse
import functools
import gc
import sys
import time

SIZES = {  # hidden, intermediate, layers (Llama shapes; 8 KV heads, vocab 32000)
    "1b": (2048, 8192, 16),
    "8b": (4096, 14336, 32),
}
VARIANTS = ("bf16", "w4g128-a16-kv:16", "wfp8e4m3-a16-kv:16")


def cuda_time_us(fn, x, iters: int = 200) -> float:
    import torch

    for _ in range(10):
        fn(x)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(x)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / iters


def kernel_table(shapes, tokens) -> None:
    import torch
    import torch.nn.functional as F

    from qdrift.real.convert import weight_scheme
    from qdrift.real.kernels import SCALED_MM, TINYGEMM, prepare
    from qdrift.real.packing import pack_weight
    from qdrift.spec import QuantSpec

    print("kernels: one linear [out, in], microseconds per matmul (CUDA events, 200 calls)")
    print(f"  {'out x in':>12} {'M':>4} {'bf16':>8} {'int4':>8} {'fp8':>8}  bf16/int4  bf16/fp8")
    for out, k in shapes:
        w = torch.randn(out, k, device="cuda") * 0.02
        int4 = prepare(TINYGEMM, pack_weight(w, weight_scheme(QuantSpec.parse(VARIANTS[1])), "w"), torch.bfloat16)
        fp8 = prepare(SCALED_MM, pack_weight(w, weight_scheme(QuantSpec.parse(VARIANTS[2])), "w"), torch.bfloat16)
        bf16 = w.to(torch.bfloat16)
        for m in tokens:
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            t = [cuda_time_us(f, x) for f in (functools.partial(F.linear, weight=bf16), int4, fp8)]
            print(f"  {f'{out} x {k}':>12} {m:>4} {t[0]:8.1f} {t[1]:8.1f} {t[2]:8.1f}  "
                  f"{t[0] / t[1]:9.2f} {t[0] / t[2]:9.2f}")
    torch.cuda.empty_cache()


def decode_rate(model, ids, new_tokens: int) -> float:
    import torch

    with torch.no_grad():
        # Warm-up over the same lengths as the timed run: kernel preparation, and cuDNN attention
        # builds (and caches) a plan per new sequence length, which would otherwise land on
        # whichever variant runs first.
        kw = dict(attention_mask=torch.ones_like(ids), pad_token_id=0, do_sample=False,
                  max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        model.generate(ids, **kw)
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, **kw)
        torch.cuda.synchronize()
    return new_tokens * ids.shape[0] / (time.perf_counter() - t)


def graph_step_ms(model, batch: int, context: int = 64, replays: int = 50) -> float:
    """Milliseconds per decode step (one new token per sequence, `context` tokens cached), replayed
    as one CUDA graph: no Python or launch cost, so the time is the GPU's (weights read, matmuls)."""
    import torch
    from transformers import StaticCache

    vocab = model.config.vocab_size
    cache = StaticCache(config=model.config, max_cache_len=context + replays + 16)  # each replay may advance it
    prompt = torch.randint(0, vocab, (batch, context), generator=torch.Generator().manual_seed(0)).cuda()
    token = prompt[:, -1:].clone()
    position = torch.full((batch, 1), context, device="cuda")
    with torch.no_grad():
        model(prompt, cache=cache, use_cache=True)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(3):  # kernel preparation (packing, workspace) happens outside the capture
                model(token, position_ids=position, cache=cache, use_cache=True)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(token, position_ids=position, cache=cache, use_cache=True)
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / replays


def linear_weight_bytes(model) -> int:
    from torch import nn

    from qdrift.real import real_modules

    real = real_modules(model)
    dense = sum(m.weight.numel() * m.weight.element_size() for n, m in model.named_modules()
                if isinstance(m, nn.Linear) and n != "lm_head")
    return dense + sum(m.storage_bytes() for m in real.values())


def decode_table(size: str, batches: list[int], new_tokens: int) -> None:
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig

    from qdrift.real import path_of, quantize_real

    hidden, inter, layers = SIZES[size]
    config = LlamaConfig(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                         num_attention_heads=hidden // 128, num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=4096)
    rates: dict[tuple[str, int], float] = {}
    steps: dict[tuple[str, int], float] = {}
    for variant in VARIANTS:
        torch.manual_seed(0)
        with torch.device("cuda"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
        params = sum(x.numel() for x in model.parameters())
        if variant != "bf16":
            quantize_real(model, variant, kernel="fused")
        gc.collect()
        torch.cuda.empty_cache()
        for batch in batches:
            ids = torch.randint(0, config.vocab_size, (batch, 32),
                                generator=torch.Generator().manual_seed(0)).cuda()
            torch.cuda.reset_peak_memory_stats()
            rate = rates[variant, batch] = decode_rate(model, ids, new_tokens)
            peak = torch.cuda.max_memory_allocated() / 2**30
            try:
                step = steps[variant, batch] = graph_step_ms(model, batch)
            except Exception as e:  # printed, not hidden: the generate rate above still stands
                print(f"  graph step failed for {variant} batch {batch}: {type(e).__name__}: {e}")
                step = steps[variant, batch] = float("nan")
            kernel = "unquantized" if variant == "bf16" else path_of(model).backend
            print(f"  {size} ({params / 1e9:.2f}B) batch {batch:<3} {variant:<20} generate {rate:7.1f} tok/s "
                  f"x{rate / rates['bf16', batch]:.2f} | graph step {step:6.3f} ms "
                  f"x{steps['bf16', batch] / step:.2f} | linear weights "
                  f"{linear_weight_bytes(model) / 2**30:.2f} GiB  peak {peak:.2f} GiB  [{kernel}]",
                  flush=True)
        del model
        gc.collect()
        torch.cuda.empty_cache()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", nargs="+", default=["1b", "8b"], choices=sorted(SIZES))
    p.add_argument("--batches", nargs="+", type=int, default=[1, 16])
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--skip-kernels", action="store_true")
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("real_quant_gpu: no CUDA device here; this benchmark measures GPU kernels and decode speed "
              "and needs one", file=sys.stderr)
        return 2
    import transformers

    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, transformers {transformers.__version__}")
    if not args.skip_kernels:
        kernel_table([(4096, 4096), (14336, 4096), (4096, 14336)], [1, 16])
    print(f"decode: generate, greedy, 32 prompt tokens, {args.new_tokens} new tokens (wall clock)")
    for size in args.sizes:
        decode_table(size, args.batches, args.new_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
