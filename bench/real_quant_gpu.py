"""Decode tokens/s, real INT4 (tinygemm) vs BF16, for a random-weight Llama of >= 1B parameters on CUDA.

    python bench/real_quant_gpu.py                 # ~1.2B parameters, 128 new tokens, batch 1
    python bench/real_quant_gpu.py --new-tokens 32 --layers 8   # shorter, for a tight time limit

Random weights are fine for speed. Prints both rates and their ratio, and the backend the INT4
linears really ran (from their execution record), so a dequant fallback cannot pass as a fused run.
"""

from __future__ import annotations

import argparse
import sys
import time


def decode_rate(model, ids, new_tokens: int) -> float:
    import torch

    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, do_sample=False)  # warm-up, kernel prep
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        torch.cuda.synchronize()
    return new_tokens * ids.shape[0] / (time.perf_counter() - t)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=16, help="decoder layers (16 gives ~1.2B parameters)")
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--spec", default="w4g128-a16-kv:16")
    args = p.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("real_quant_gpu: no CUDA device here; this benchmark measures GPU decode speed and needs one",
              file=sys.stderr)
        return 2
    from transformers import AutoModelForCausalLM, LlamaConfig

    from qdrift.real import path_of, quantize_real

    config = LlamaConfig(hidden_size=2048, intermediate_size=8192, num_hidden_layers=args.layers,
                         num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=4096)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    params = sum(x.numel() for x in model.parameters())
    ids = torch.randint(0, config.vocab_size, (args.batch, 32), device="cuda")
    bf16 = decode_rate(model, ids, args.new_tokens)
    quantize_real(model, args.spec, kernel="auto")
    torch.cuda.empty_cache()
    int4 = decode_rate(model, ids, args.new_tokens)
    print(f"GPU: {torch.cuda.get_device_name()}, model: random Llama {params / 1e9:.2f}B parameters, "
          f"batch {args.batch}, {args.new_tokens} new tokens")
    print(f"real path: {path_of(model)}")
    print(f"decode tokens/s: bf16 {bf16:.1f}, {args.spec} {int4:.1f}, ratio int4/bf16 {int4 / bf16:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
