"""The trainer's loss weighting and integer value features, checked against direct references."""

import math
import random

import pytest
import torch

from qdrift.organism.tokenizer import build_tokenizer
from qdrift.organism.train import load_for_training, main, make_batch, model_config, numeric_embedding_init


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_decision_weight_lands_on_each_calls_tool_name_only(tok):
    ids, weight = make_batch(tok, random.Random(0), horizon=3, batch_tokens=200, envs=("pointer_chase",),
                             decision_weight=7.0)
    names = {tok.convert_tokens_to_ids(n) for n in ("lookup", "answer")}
    heavy = weight == 7.0
    assert heavy.any()
    assert all(int(t) in names for t in ids[heavy])
    # one decision per call: 3 lookups + the answer, per episode
    assert int(heavy.sum()) == 4 * ids.shape[0]
    assert set(weight[~heavy].unique().tolist()) <= {0.0, 1.0}


def test_first_and_last_call_weights_multiply_every_token_of_those_calls_only(tok):
    plain_ids, plain = make_batch(tok, random.Random(3), horizon=4, batch_tokens=300, envs=("ledger",))
    ids, weight = make_batch(tok, random.Random(3), horizon=4, batch_tokens=300, envs=("ledger",),
                             decision_weight=2.0, first_call_weight=5.0, last_call_weight=3.0)
    assert torch.equal(ids, plain_ids)
    eos = tok.eos_token_id
    opening = tok.convert_tokens_to_ids('<tool_call>\n{"name": "')
    for row in range(ids.shape[0]):
        targets = (plain[row] > 0).nonzero().flatten().tolist()
        ends = [t for t in targets if ids[row, t] == eos]
        assert len(ends) == 5  # 4 apply calls and the finish call
        for t in targets:  # a direct reference: first call x5, last call x3, decision token x2
            want = (5.0 if t <= ends[0] else 3.0 if t > ends[-2] else 1.0) * (2.0 if ids[row, t - 1] == opening else 1.0)
            assert float(weight[row, t]) == want, (row, t)
        assert float(weight[row][plain[row] == 0].abs().sum()) == 0.0


def test_numeric_features_are_sines_and_cosines_of_the_value(tok):
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM._from_config(model_config(tok, max_positions=64))
    before = model.get_input_embeddings().weight.detach().clone()
    numeric_embedding_init(model, tok, 8)
    emb = model.get_input_embeddings().weight.detach()
    amp = 0.02 * math.sqrt(2)
    for v in (-5, 0, 1, 17, 999):
        row = emb[tok.convert_tokens_to_ids(str(v))]
        periods = [2.5 * (2000 / 2.5) ** (k / 3) for k in range(4)]
        want = [amp * math.sin(2 * math.pi * v / p) for p in periods] + [amp * math.cos(2 * math.pi * v / p) for p in periods]
        assert torch.allclose(row[:8], torch.tensor(want), atol=1e-6)
    key = tok.convert_tokens_to_ids("k17")
    assert torch.equal(emb[key], before[key])  # non-integer tokens keep their random init
    with pytest.raises(ValueError, match="must be even"):
        numeric_embedding_init(model, tok, 7)


def test_grown_vocabulary_keeps_old_rows_and_draws_new_ones_like_values(tok):
    from transformers import LlamaForCausalLM

    from qdrift.organism.tokenizer import FILE_WORDS, value_pieces
    from qdrift.organism.train import grow_vocabulary

    torch.manual_seed(0)
    small = len(tok) - len(FILE_WORDS)
    config = model_config(tok, max_positions=64)
    config.vocab_size = small
    model = LlamaForCausalLM._from_config(config)
    with torch.no_grad():  # values sit apart from the other rows, as in a trained model
        model.get_input_embeddings().weight[tok.convert_tokens_to_ids(value_pieces()[: -len(FILE_WORDS)])] += 0.5
    before = model.get_input_embeddings().weight.detach().clone()
    assert grow_vocabulary(model, tok) == len(FILE_WORDS)
    emb = model.get_input_embeddings().weight.detach()
    assert emb.shape[0] == len(tok) and model.config.vocab_size == len(tok)
    assert torch.equal(emb[:small], before)
    assert model.get_output_embeddings().weight.data_ptr() == emb.data_ptr()  # still tied
    new = emb[small:]
    assert abs(float(new.mean()) - 0.5) < 0.05  # the value rows' mean, not the all-row mean (~0.4 here)
    assert float(new.std(0).mean()) == pytest.approx(0.02, rel=0.3)
    assert grow_vocabulary(model, tok) == 0


def test_horizon_sampling_ramp_and_long_share():
    from qdrift.organism.train import sample_horizon

    rng = random.Random(0)
    early = [sample_horizon(rng, 0.01, 200) for _ in range(500)]
    assert max(early) <= 12  # the default ramp starts at 8
    no_ramp = [sample_horizon(rng, 0.01, 200, ramp=0.0) for _ in range(2000)]
    assert max(no_ramp) > 150 and min(no_ramp) >= 1
    mixed = [sample_horizon(rng, 0.01, 200, long_share=0.3) for _ in range(2000)]
    share = sum(h >= 120 for h in mixed) / len(mixed)
    assert 0.25 < share < 0.35  # the long draws alone, since the ramp keeps the rest <= 12


def test_a_bad_recall_keyspace_stops_the_trainer_before_it_starts(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "run"), "--dense-share", "0.5", "--dense-recall-keyspace", "30"])
    assert "--dense-recall-keyspace: recall keyspace=30 is smaller than a table" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_copy_batch_at_one_length_is_the_fixed_distance_repeat():
    from qdrift.organism.train import copy_batch

    ids, weight = copy_batch(torch.Generator().manual_seed(3), 500, 10, batch=4, length=6)
    x = torch.randint(10, 500, (4, 6), generator=torch.Generator().manual_seed(3))  # the same draw, by hand
    assert torch.equal(ids, torch.cat([x, torch.full((4, 1), 9), x], 1))
    assert torch.equal(weight, torch.tensor([[0.0] * 7 + [1.0] * 6] * 4))


def test_copy_batch_with_a_length_range_repeats_each_string_at_its_own_distance():
    from qdrift.organism.train import copy_batch

    ids, weight = copy_batch(torch.Generator().manual_seed(0), 500, 10, batch=64, length=3, max_length=9, pad_id=0)
    lengths = set()
    for row, w in zip(ids.tolist(), weight.tolist(), strict=True):
        n = row.index(9)  # the separator
        lengths.add(n)
        assert 3 <= n <= 9 and all(10 <= t < 500 for t in row[:n])
        assert row[n + 1: 2 * n + 1] == row[:n] and set(row[2 * n + 1:]) <= {0}
        assert w == [0.0] * (n + 1) + [1.0] * n + [0.0] * (len(row) - 2 * n - 1)
    assert len(lengths) >= 5  # the distance to the repeat varies, so position alone cannot copy it
    with pytest.raises(ValueError, match="copy lengths 9..3"):
        copy_batch(torch.Generator(), 500, 10, length=9, max_length=3)


def test_copy_lengths_out_of_order_stop_the_trainer_before_it_starts(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "run"), "--copy-lengths", "9", "3"])
    assert "--copy-lengths: copy lengths 9..3: need 1 <= MIN <= MAX" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_copy_warmup_runs_from_saved_weights_only_when_asked(tmp_path):
    import json

    fast = ["--steps", "1", "--dense-share", "1", "--dense-kinds", "sum", "--dense-batch", "1", "--eval-horizons", "1"]
    main(["--out", str(tmp_path / "a"), "--copy-warmup", "0", *fast])
    main(["--out", str(tmp_path / "b"), "--init", str(tmp_path / "a"), *fast])
    main(["--out", str(tmp_path / "c"), "--init", str(tmp_path / "a"), "--copy-warmup", "3", "--copy-lengths", "2", "5", *fast])

    def rows(run):
        return [json.loads(line) for line in (tmp_path / run / "train_log.jsonl").read_text().splitlines()]

    assert rows("b")[0]["copy_warmup"] == "0" and not any("copy_step" in r for r in rows("b"))
    assert rows("c")[0]["copy_warmup"] == "3" and [r["copy_step"] for r in rows("c") if "copy_step" in r] == [3]


def test_a_new_rope_base_from_saved_weights_reaches_the_rotary_tables_and_the_saved_config(tmp_path):
    from transformers import AutoConfig


    fast = ["--steps", "1", "--dense-share", "1", "--dense-kinds", "sum", "--dense-batch", "1", "--eval-horizons", "1"]
    main(["--out", str(tmp_path / "a"), "--copy-warmup", "0", *fast])
    main(["--out", str(tmp_path / "b"), "--init", str(tmp_path / "a"), "--rope-theta", "1e5", *fast])
    assert AutoConfig.from_pretrained(tmp_path / "a").rope_parameters["rope_theta"] == 10_000.0
    assert AutoConfig.from_pretrained(tmp_path / "b").rope_parameters["rope_theta"] == 100_000.0
    for run, theta in (("a", 1e4), ("b", 1e5)):
        model = load_for_training(tmp_path / run)  # the saved base, reloaded
        expected = 1.0 / theta ** (torch.arange(0, 32, 2, dtype=torch.float64) / 32)  # RoPE's definition, head_dim 32
        assert torch.allclose(model.model.rotary_emb.inv_freq.double(), expected, rtol=1e-6)
    # The weights themselves carry over unchanged; only the positions' rotation differs.
    a, b = load_for_training(tmp_path / "a"), load_for_training(tmp_path / "a", rope_theta=1e5)
    assert torch.equal(a.model.embed_tokens.weight, b.model.embed_tokens.weight)
    assert b.model.rotary_emb.inv_freq[-1] < a.model.rotary_emb.inv_freq[-1]


def test_a_rope_base_that_is_not_positive_stops_the_trainer_before_it_starts(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "run"), "--rope-theta", "0"])
    assert "--rope-theta: the RoPE base (rope_theta) must be positive, got 0.0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_loading_with_a_rope_base_that_is_not_positive_names_the_base(tmp_path):
    with pytest.raises(ValueError, match=r"RoPE base \(rope_theta\) must be positive, got -1.0"):
        load_for_training(tmp_path / "never-read", rope_theta=-1.0)
