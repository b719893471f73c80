"""Dense synthetic tasks for dict_sum's two skills: recalling a value by its key, and adding to a total.

Why: a dict_sum report needs the value of the key the last tool result names, found in the task's
table, added to the previous total, and in its trajectories that is one target token among about
twenty call tokens. These batches put a target on every query or addition. The sums are learned
densely (model card, run 14); the recall was learned only with its keys in order (runs 13, 19),
and then, by the evidence of run 20, by position rather than by key. Every key and every integer in
-999..999 is one token of the organism's tokenizer, so each target is one token.
"""

from __future__ import annotations

import random

from qdrift.envs.table_keys import KEY_SPACE, table_keys
from qdrift.organism.data import pad_right

RECALL_MAX_KEYS = 40  # a recall table has 5..40 keys


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False).input_ids


def _one_token(tokenizer, text: str) -> int:
    ids = _encode(tokenizer, text)
    if len(ids) != 1:
        raise ValueError(f"{text!r} is {len(ids)} tokens for this tokenizer; the dense tasks need one-token values")
    return ids[0]


def check_recall_keyspace(keyspace: int) -> None:
    """Refuse a keyspace that a table could outgrow, before any table is drawn."""
    if keyspace != 0 and not RECALL_MAX_KEYS <= keyspace <= KEY_SPACE:
        raise ValueError(f"recall keyspace={keyspace} is smaller than a table (up to {RECALL_MAX_KEYS} keys) or "
                         f"past k{KEY_SPACE - 1}; valid: 0 (keys in order) or {RECALL_MAX_KEYS}..{KEY_SPACE}")


def recall_example(tokenizer, rng: random.Random, queries: int = 30, keyspace: int = 0) -> tuple[list[int], list[float]]:
    """`Table: k0=5 k1=-8 ...` (5-40 keys, values up to 9 or 99), then ` k17=` -> `-8` per query.

    keyspace 0: the keys are k0, k1, ... in order, like dict_sum's default table; else they are
    drawn from k0..k{keyspace-1} in random order (dict_sum's `keyspace` knob).
    """
    check_recall_keyspace(keyspace)
    vmax = rng.choice([9, 99])
    names = table_keys(rng, rng.randint(5, RECALL_MAX_KEYS), keyspace)
    table = {key: rng.randint(-vmax, vmax) for key in names}
    text = "Table: " + " ".join(f"{k}={v}" for k, v in table.items()) + "\nquery"
    ids = _encode(tokenizer, text)
    weight = [0.0] * len(ids)
    for _ in range(queries):
        key = rng.choice(list(table))
        prompt = _encode(tokenizer, f" {key}=")
        ids += prompt + [_one_token(tokenizer, str(table[key]))]
        weight += [0.0] * len(prompt) + [1.0]
    return ids, weight


def sum_example(tokenizer, rng: random.Random, additions: int = 50, vmax: int = 9,
                start: int = 300) -> tuple[list[int], list[float]]:
    """`sum -6 = -6 4 = -2 ...`: each addend, then the running total (the target), from 0 or a random start."""
    total = rng.choice([0, rng.randint(-start, start)])
    ids = _encode(tokenizer, "sum")
    weight = [0.0] * len(ids)
    for _ in range(additions):
        d = rng.randint(-vmax, vmax)
        total += d if abs(total + d) <= 999 else -d
        prompt = _encode(tokenizer, f" {d} = ")
        ids += prompt + [_one_token(tokenizer, str(total))]
        weight += [0.0] * len(prompt) + [1.0]
    return ids, weight


def dense_batch(tokenizer, rng: random.Random, kind: str, batch: int = 48, sum_vmax: int = 9,
                recall_keyspace: int = 0):
    """(ids, loss weights) of `batch` right-padded examples of `kind` ('recall' or 'sum'; addends up
    to `sum_vmax`; recall keys from `recall_keyspace` as in `recall_example`)."""
    make = {"recall": lambda tok, r: recall_example(tok, r, keyspace=recall_keyspace),
            "sum": lambda tok, r: sum_example(tok, r, vmax=sum_vmax)}
    if kind not in make:
        raise ValueError(f"unknown dense task {kind!r}; valid: {sorted(make)}")
    return pad_right([make[kind](tokenizer, rng) for _ in range(batch)], tokenizer.pad_token_id)
