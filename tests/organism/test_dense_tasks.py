"""dict_sum's dense skill tasks: targets checked against the text's own table and addends, parsed back."""

import json
import random
import re

import pytest

from qdrift.organism.dense_tasks import dense_batch, recall_example, sum_example
from qdrift.organism.tokenizer import build_tokenizer
from qdrift.tiny import tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def targets(tok, ids, weight):
    """(text before each weighted token, that token's text)."""
    return [(tok.decode(ids[:i]), tok.decode([ids[i]])) for i, w in enumerate(weight) if w]


def test_recall_targets_are_the_tables_values_of_the_queried_keys(tok):
    rng = random.Random(3)
    for _ in range(20):
        ids, weight = recall_example(tok, rng, queries=12)
        text = tok.decode(ids)
        table = dict(re.findall(r"(k\d+)=(-?\d+)", text.split("\nquery")[0]))
        assert 5 <= len(table) <= 40
        got = targets(tok, ids, weight)
        assert len(got) == 12
        for before, value in got:
            key = re.search(r" (k\d+)=$", before).group(1)
            assert value == table[key]


def test_recall_keyspace_draws_its_keys_from_the_range_in_random_order(tok):
    rng = random.Random(5)
    for _ in range(10):
        ids, weight = recall_example(tok, rng, queries=12, keyspace=1000)
        text = tok.decode(ids)
        table = dict(re.findall(r"(k\d+)=(-?\d+)", text.split("\nquery")[0]))
        keys = [int(k[1:]) for k in table]
        assert len(set(keys)) == len(keys) >= 5 and all(k < 1000 for k in keys) and keys != sorted(keys)
        for before, value in targets(tok, ids, weight):
            assert value == table[re.search(r" (k\d+)=$", before).group(1)]
    with pytest.raises(ValueError, match="keyspace=30 is smaller than a table"):
        dense_batch(tok, random.Random(0), "recall", batch=8, recall_keyspace=30)


@pytest.mark.parametrize("keyspace", [-1, 5, 39, 1001])
def test_a_keyspace_a_table_could_outgrow_is_refused_before_any_draw(tok, keyspace):
    # 5 and 39 hold some tables and not others: refused whatever the draw would have been
    for seed in range(5):
        with pytest.raises(ValueError, match=rf"keyspace={keyspace} .* valid: 0 \(keys in order\) or 40..1000"):
            recall_example(tok, random.Random(seed), keyspace=keyspace)
    recall_example(tok, random.Random(0), keyspace=40)


def test_sum_targets_are_the_running_totals_of_the_addends(tok):
    rng = random.Random(4)
    for _ in range(20):
        ids, weight = sum_example(tok, rng, additions=30, vmax=9, start=990)
        got = targets(tok, ids, weight)
        assert len(got) == 30
        pairs = re.findall(r" (-?\d+) = (-?\d+)", tok.decode(ids))
        assert [int(s) for _, s in pairs] == [int(v) for _, v in got]
        for (_, prev), (d, total) in zip(pairs, pairs[1:], strict=False):
            prev, d, total = int(prev), int(d), int(total)
            assert abs(d) <= 9 and abs(total) <= 999
            # The addend is subtracted instead only where adding it would leave the one-token range.
            assert total == (prev + d if abs(prev + d) <= 999 else prev - d)


def test_dense_batch_pads_right_and_weights_only_targets(tok):
    ids, weight = dense_batch(tok, random.Random(0), "sum", batch=4)
    assert ids.shape == weight.shape and ids.shape[0] == 4
    assert (weight[ids == tok.pad_token_id] == 0).all()
    assert int(weight.sum()) == 4 * 50
    with pytest.raises(ValueError, match="unknown dense task 'add'.*'recall', 'sum'"):
        dense_batch(tok, random.Random(0), "add")


def test_dense_batch_sum_addends_follow_sum_vmax(tok):
    ids, weight = dense_batch(tok, random.Random(1), "sum", batch=6, sum_vmax=1)
    addends = {int(d) for row in ids for d, _ in re.findall(r" (-?\d+) = (-?\d+)", tok.decode(row))}
    assert addends == {-1, 0, 1}


def test_a_tokenizer_that_splits_values_is_refused():
    with pytest.raises(ValueError, match="tokens for this tokenizer; the dense tasks need one-token values"):
        recall_example(tiny_tokenizer(), random.Random(0))


def test_trainer_mixes_dense_batches_and_logs_their_losses_apart(tmp_path):
    from qdrift.organism.train import main

    main(["--out", str(tmp_path), "--steps", "20", "--copy-warmup", "0", "--dense-share", "0.5", "--dense-batch", "4", "--eval-every", "100",
          "--batch-tokens", "300", "--max-horizon", "2", "--eval-horizons", "1", "--envs", "pointer_chase"])
    rows = [json.loads(line) for line in (tmp_path / "train_log.jsonl").open()]
    step20 = next(r for r in rows if r.get("step") == 20 and "loss" in r)
    assert "recall_loss" in step20 and "sum_loss" in step20 and step20["loss"] is not None
    # Only dense steps: no episode loss and no horizon to report, and no episode batch is drawn.
    main(["--out", str(tmp_path / "dense"), "--steps", "1", "--copy-warmup", "0", "--dense-share", "1", "--dense-batch", "2",
          "--eval-every", "100", "--eval-horizons", "1", "--envs", "pointer_chase"])
    first = json.loads((tmp_path / "dense" / "train_log.jsonl").read_text().splitlines()[1])
    assert first["step"] == 1 and first["loss"] is None and first["horizon"] is None
    assert ("recall_loss" in first) != ("sum_loss" in first)
    # --dense-kinds picks the tasks: recall only.
    main(["--out", str(tmp_path / "recall"), "--steps", "20", "--copy-warmup", "0", "--dense-share", "1", "--dense-batch", "2",
          "--eval-every", "100", "--eval-horizons", "1", "--envs", "pointer_chase", "--dense-kinds", "recall"])
    rows = [json.loads(line) for line in (tmp_path / "recall" / "train_log.jsonl").open()]
    assert all("sum_loss" not in r for r in rows) and any("recall_loss" in r for r in rows)
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path), "--dense-share", "1.5"])
