"""Training episodes: oracle trajectories tokenized exactly as the episode runner feeds the model.

At evaluation `qdrift.backends.hf.HFPolicy` encodes the rendered prompt (generation prompt and any
prefilled call opening included) as one piece, then each generated turn's tokens and the eos, then
each later suffix of the rendering (the tool result and the next generation prompt) encoded on its
own. A training sequence is built from the same pieces in the same way, so the model is trained on
the token boundaries it meets at evaluation; only the generated tokens (the call and its eos)
carry a loss.

Which episode a step trains on is a pure function of (config seed, step, index): a resumed run
sees exactly the data an uninterrupted one would, whatever happened before.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from qdrift.envs.registry import DEV_SEEDS_FROM, make_environment
from qdrift.finetune.config import FinetuneConfig, MixEntry
from qdrift.organism.data import oracle_conversation


@dataclass(frozen=True)
class Episode:
    env: str
    horizon: int
    seed: int
    knobs: dict
    ids: list[int]
    targets: list[bool]  # True where the model generates the token at evaluation (loss on predicting it)

    @property
    def n_targets(self) -> int:
        return sum(self.targets)


def encode_conversation(tokenizer, prompt, env) -> tuple[list[int], list[bool]]:
    """(ids, targets) of `env`'s oracle conversation as `HFPolicy` with `prompt` would feed it."""
    messages = oracle_conversation(env, prompt.parser)
    tools = env.tools()
    eos_id = tokenizer.eos_token_id
    eos_text = tokenizer.decode([eos_id], skip_special_tokens=False)
    opening = prompt.prefilled

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False).input_ids

    first = next(i for i, m in enumerate(messages) if m["role"] == "assistant")
    cached = prompt.render(tokenizer, messages[:first], tools, add_generation_prompt=True)
    ids = encode(cached)
    targets = [False] * len(ids)
    for i in range(first, len(messages)):
        m = messages[i]
        if m["role"] != "assistant":
            continue
        if i > first:  # the suffix the runner feeds before this turn
            target = prompt.render(tokenizer, messages[:i], tools, add_generation_prompt=True)
            if not target.startswith(cached):
                raise ValueError(f"{env!r}: the chat template re-renders earlier turns ({prompt.describe()}), so "
                                 "the runner could not extend its cache either; use prompted tools")
            piece = encode(target[len(cached):])
            ids += piece
            targets += [False] * len(piece)
            cached = target
        raw = m["content"]
        if not raw.startswith(opening):
            raise ValueError(f"{env!r}: the call {raw!r} does not start with the prefilled opening {opening!r}")
        generated = encode(raw[len(opening):]) + [eos_id]
        ids += generated
        targets += [True] * len(generated)
        cached += raw[len(opening):] + eos_text
    return ids, targets


def _choose(rng: random.Random, mix: tuple[MixEntry, ...]) -> MixEntry:
    total = sum(m.weight for m in mix)
    x = rng.random() * total
    for m in mix:
        x -= m.weight
        if x < 0:
            return m
    return mix[-1]


def draw(cfg: FinetuneConfig, step: int, index: int) -> tuple[str, int, int, dict]:
    """(env, horizon, seed, knobs) of episode `index` of optimiser step `step`."""
    rng = random.Random(f"qdrift-finetune|{cfg.seed}|{step}|{index}")
    entry = _choose(rng, cfg.mix)
    lo, hi = entry.horizons
    horizon = min(hi, max(lo, int(math.exp(rng.uniform(math.log(lo), math.log(hi + 1))))))
    knobs = {k: rng.choice(values) for k, values in sorted(entry.knobs.items())}
    seed = rng.randrange(DEV_SEEDS_FROM)
    return entry.env, horizon, seed, knobs


def episode(cfg: FinetuneConfig, tokenizer, prompt, step: int, index: int) -> Episode:
    """Episode `index` of step `step`, cut to `cfg.max_tokens` tokens."""
    env_name, horizon, seed, knobs = draw(cfg, step, index)
    env = make_environment(env_name, horizon=horizon, seed=seed, split="train", **knobs)
    ids, targets = encode_conversation(tokenizer, prompt, env)
    return Episode(env_name, horizon, seed, knobs, ids[: cfg.max_tokens], targets[: cfg.max_tokens])
