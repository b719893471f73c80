"""Write pointer_chase_keys.jsonl: short-form items for the organism from held-out PointerChase seeds.

Each item is one decision of a PointerChase episode (horizon 4, 20 distractor keys) on a held-out
seed (>= 1_000_000, never trained on): the oracle conversation is cut after the i-th tool result
(i = 1..3, drawn from the seed), rendered with the organism's chat template.
- `prompt`: the rendered conversation up to the assistant turn (generation prompt included);
- `target`: the correct next call (lookup of the key just returned), for the generative task;
- `choices` / `gold`: for the multiple-choice task, the key inside that call, as a continuation
  of `prefix` (the call up to the key): the right key, the key looked up last (repeating the
  previous call), the start key, and one other table key, in an order drawn from the seed.

Run from the repository root: `python evals/organism/make_pointer_chase.py` (deterministic).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment
from qdrift.organism import WEIGHTS
from qdrift.organism.data import oracle_conversation

N_ITEMS, HORIZON, FIRST_SEED = 24, 4, TRAIN_SEEDS_BELOW + 7_000
PREFIX = '<tool_call>\n{"name": "lookup", "arguments": {"key": "'
OUT = Path(__file__).resolve().parent / "pointer_chase_keys.jsonl"


def item(tokenizer, seed: int) -> dict:
    env = make_environment("pointer_chase", HORIZON, seed, split="eval")
    messages = oracle_conversation(env)
    rng = random.Random(seed)
    step = rng.randint(1, HORIZON - 1)  # cut after `step` tool results
    cut = 2 + 2 * step  # system, user, then (assistant, tool) pairs
    prompt = tokenizer.apply_chat_template(messages[:cut], tools=env.tools(), tokenize=False,
                                           add_generation_prompt=True)
    target = messages[cut]["content"]
    right, last, start = env.chain[step], env.chain[step - 1], env.chain[0]
    assert f'"key": "{right}"' in target, (seed, target)
    others = sorted(set(env.table) - {right, last, start})
    keys = list(dict.fromkeys([right, last, start, rng.choice(others)]))
    while len(keys) < 4:
        keys.append(rng.choice([k for k in others if k not in keys]))
    rng.shuffle(keys)
    return {"seed": seed, "step": step, "prompt": prompt, "prefix": PREFIX, "target": target,
            "choices": [f'{k}"}}}}\n</tool_call>' for k in keys], "gold": keys.index(right)}


def main() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(WEIGHTS, local_files_only=True)
    with OUT.open("w", encoding="utf-8") as f:
        for i in range(N_ITEMS):
            f.write(json.dumps(item(tokenizer, FIRST_SEED + i)) + "\n")
    print(f"wrote {N_ITEMS} items to {OUT}")


if __name__ == "__main__":
    main()
