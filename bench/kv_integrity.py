"""Overhead of the paged cache's page-tag checks at batch 8 decode: checks on vs off, side by side.

Both arms use the same PagedCache (so only the verification differs); repeats are interleaved and
the median time per decode step is compared.

    PYTHONPATH=. python bench/kv_integrity.py [--model tiny|organism] [--steps 64] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit

import torch

from qdrift.backends.paged import PagePool
from qdrift.backends.session import BatchSession


def decode_time(model, check: bool, prompt_len: int, steps: int, vocab: int) -> float:
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(1, vocab, (prompt_len,), generator=g).tolist() for _ in range(8)]
    s = BatchSession(model, 8, pad_id=0, paged=True, page_size=16, check_pages=check)
    logits = s.feed(prompts)
    t0 = time.perf_counter()
    s.generate(logits, list(range(8)), max_new_tokens=steps, eos_ids=set(), stop_check=lambda r, i: False)
    return (time.perf_counter() - t0) / steps


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="organism", choices=["organism", "tiny"])
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.model == "organism":
        from qdrift.organism import load_organism

        model, _ = load_organism()
    else:
        from qdrift.tiny import tiny_model

        model = tiny_model("llama")
    model.eval()
    vocab = model.config.get_text_config().vocab_size
    on, off = [], []
    decode_time(model, True, args.prompt_len, 4, vocab)  # warm-up
    for _ in range(args.repeats):
        off.append(decode_time(model, False, args.prompt_len, args.steps, vocab))
        on.append(decode_time(model, True, args.prompt_len, args.steps, vocab))
    m_on, m_off = statistics.median(on), statistics.median(off)
    print(f"batch 8 decode, {args.model}, prompt {args.prompt_len}, {args.steps} steps x {args.repeats} interleaved repeats")
    print(f"checks off: {m_off * 1e3:.3f} ms/step   checks on: {m_on * 1e3:.3f} ms/step   "
          f"overhead x{m_on / m_off:.4f} ({(m_on / m_off - 1) * 100:+.2f}%; target < +1%)")
    # The check itself, timed alone: on a loaded machine the two arms' difference is mostly noise.
    pool = PagePool(8, 16, torch.device("cpu"))
    pool.reserve(args.prompt_len + args.steps)
    n = 5000
    per_check = timeit.timeit(pool.verify, number=n) / n
    print(f"one check (once per forward): {per_check * 1e6:.1f} us = {per_check / m_off * 100:.3f}% of a checks-off step")


if __name__ == "__main__":
    main()
