"""Table key names: in order, or distinct draws from a key space."""

import random

from qdrift.envs.table_keys import table_keys


def test_keyspace_zero_lists_the_first_keys_in_order_and_draws_nothing():
    rng = random.Random(1)
    assert table_keys(rng, 4) == ["k0", "k1", "k2", "k3"]
    assert rng.random() == random.Random(1).random()  # the stream is untouched


def test_a_keyspace_draws_distinct_keys_from_it_as_random_sample_does():
    keys = table_keys(random.Random(2), 30, 1000)
    assert keys == [f"k{i}" for i in random.Random(2).sample(range(1000), 30)]
    assert len(set(keys)) == 30 and all(0 <= int(k[1:]) < 1000 for k in keys) and keys != sorted(keys)
