"""Key names for a lookup table, shared by dict_sum and the organism's dense recall task.

Why one function: the dense recall exists to train dict_sum's lookup, so both must draw their keys
the same way (and from the same random stream), or the two would drift apart unnoticed.
"""

from __future__ import annotations

import random

KEY_SPACE = 1000  # keys k0..k999: one token each in the organism's tokenizer


def table_keys(rng: random.Random, n: int, keyspace: int = 0) -> list[str]:
    """keyspace 0: k0..k{n-1} in order; else n distinct keys drawn from k0..k{keyspace-1}, in random order."""
    return [f"k{i}" for i in (rng.sample(range(keyspace), n) if keyspace else range(n))]
