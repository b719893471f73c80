"""`qdrift serve` throughput on this machine: baseline vs a quantized spec, side by side in one run.

Each server runs in-process on a free loopback port and answers the first turn of held-out
pointer_chase episodes (the organism's tools and messages, greedy), one request at a time over
HTTP (the server serializes generation anyway). Prints requests/s and completion tokens/s for each,
the quantized/baseline ratio, and how many calls matched the baseline's.
`OMP_NUM_THREADS=1 python bench/serve.py [--requests 30] [--spec w4g32-a16-kv:16] [--stream]`
"""

from __future__ import annotations

import argparse
import json
import time

import httpx

from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment
from qdrift.serve import ServerThread, load_served


def run(spec: str, bodies: list[dict], stream: bool) -> dict:
    with ServerThread(load_served("organism", spec)) as server, httpx.Client(base_url=server.url, timeout=120) as c:
        c.post("/chat/completions", json=bodies[0])  # warm-up, not timed
        calls, completion, prompt = [], 0, 0
        t0 = time.perf_counter()
        for body in bodies:
            if stream:
                text = c.post("/chat/completions", json={**body, "stream": True,
                                                         "stream_options": {"include_usage": True}}).text
                chunks = [json.loads(x[6:]) for x in text.split("\n") if x.startswith("data: {")]
                usage = chunks[-1]["usage"]
                calls.append([d for ch in chunks for c_ in ch["choices"] for d in c_["delta"].get("tool_calls", [])])
            else:
                r = c.post("/chat/completions", json=body).json()
                usage = r["usage"]
                calls.append([(t["function"]["name"], t["function"]["arguments"])
                              for t in r["choices"][0]["message"]["tool_calls"] or []])
            completion += usage["completion_tokens"]
            prompt += usage["prompt_tokens"]
        dt = time.perf_counter() - t0
    return {"spec": spec, "seconds": dt, "req_s": len(bodies) / dt, "tok_s": completion / dt,
            "completion_tokens": completion, "prompt_tokens": prompt, "calls": calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=30)
    ap.add_argument("--spec", default="w4g32-a16-kv:16")
    ap.add_argument("--stream", action="store_true")
    args = ap.parse_args()
    bodies = []
    for i in range(args.requests):
        env = make_environment("pointer_chase", horizon=4, seed=TRAIN_SEEDS_BELOW + i, split="eval")
        bodies.append({"messages": env.reset(), "tools": env.tools(), "temperature": 0})
    base = run("baseline", bodies, args.stream)
    quant = run(args.spec, bodies, args.stream)
    for r in (base, quant):
        print(f"{r['spec']:>20}: {r['req_s']:.2f} requests/s, {r['tok_s']:.1f} completion tokens/s "
              f"({args.requests} requests, {r['prompt_tokens']} prompt + {r['completion_tokens']} completion "
              f"tokens, {r['seconds']:.1f} s)")
    same = sum(str(a) == str(b) for a, b in zip(base["calls"], quant["calls"], strict=True)) if not args.stream else None
    print(f"quantized/baseline: requests/s x{quant['req_s'] / base['req_s']:.2f}, "
          f"tokens/s x{quant['tok_s'] / base['tok_s']:.2f}"
          + (f"; {same}/{args.requests} first calls identical to the baseline's" if same is not None else ""))


if __name__ == "__main__":
    main()
