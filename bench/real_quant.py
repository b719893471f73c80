"""Real INT4 storage on CPU: linear-layer weight bytes INT4-g128 / BF16 (goal <= 0.30) and peak RSS of
load-and-forward for the BF16 baseline, real INT4 and fake INT4, side by side in one run.

    python bench/real_quant.py                 # tiny llama
    python bench/real_quant.py --size medium   # random ~200M-parameter Llama, so the ratios mean something

Each load-and-forward runs in its own process (peak RSS is per process); the RSS after imports alone
is printed too, since torch's own footprint is in every number.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile

SPEC = "w4g128-a16-kv:16"
SIZES = {
    "tiny": None,
    "medium": dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
                   num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
}


def peak_rss_mb() -> float:
    """This process's peak RSS (VmHWM: belongs to the address space, so unlike ru_maxrss it does not
    carry the parent's peak across fork/exec)."""
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build(size: str):
    import torch

    from qdrift.tiny import tiny_model

    if SIZES[size] is None:
        return tiny_model("llama", dtype=torch.bfloat16)
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(LlamaConfig(**SIZES[size]), dtype=torch.bfloat16).eval()


def child(mode: str, directory: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    after_imports = peak_rss_mb()
    if mode == "real":
        from qdrift.real.checkpoint import load_quantized

        model = load_quantized(directory)
    else:
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16, local_files_only=True).eval()
        if mode == "fake":
            import qdrift

            qdrift.quantize(model, SPEC, keep_original=False)
    ids = torch.randint(0, model.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        model(ids)
    print(json.dumps({"imports_mb": after_imports, "peak_mb": peak_rss_mb()}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="tiny", choices=list(SIZES))
    p.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(*args.child)
    import copy

    from qdrift.real import quantize_real, real_modules
    from qdrift.real.checkpoint import save_quantized

    model = build(args.size)
    params = sum(p.numel() for p in model.parameters())
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(f"{tmp}/bf16")
        real = quantize_real(copy.deepcopy(model), SPEC)
        mods = real_modules(real)
        q_bytes = sum(m.storage_bytes() for m in mods.values())
        bf16_bytes = sum(m.in_features * m.out_features * 2 for m in mods.values())
        save_quantized(real, f"{tmp}/int4")
        del model, real
        rss = {}
        for mode, d in (("baseline", "bf16"), ("real", "int4"), ("fake", "bf16")):
            out = subprocess.run([sys.executable, __file__, "--child", mode, f"{tmp}/{d}"], capture_output=True,
                                 text=True, check=True).stdout
            rss[mode] = json.loads(out.strip().splitlines()[-1])
    print(f"model: random Llama ({args.size}), {params / 1e6:.1f}M parameters, {len(mods)} linears, spec {SPEC}")
    print(f"linear weight bytes: int4-g128 {q_bytes / 2**20:.2f} MiB, bf16 {bf16_bytes / 2**20:.2f} MiB, "
          f"ratio {q_bytes / bf16_bytes:.4f} (goal <= 0.30)")
    print(f"peak RSS of load + one 64-token forward (RSS after imports ~{rss['baseline']['imports_mb']:.0f} MiB):")
    base = rss["baseline"]["peak_mb"]
    for mode in ("baseline", "real", "fake"):
        label = {"baseline": "bf16 baseline", "real": "real int4 (load_quantized)",
                 "fake": "fake int4 (bf16 + qdrift.quantize, keep_original=False)"}[mode]
        r = rss[mode]
        print(f"  {label:<58} {r['peak_mb']:8.0f} MiB  (x{r['peak_mb'] / base:.2f} of baseline; "
              f"{r['peak_mb'] - r['imports_mb']:.0f} MiB above imports)")


if __name__ == "__main__":
    main()
