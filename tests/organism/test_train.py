"""The trainer's loss weighting and integer value features, checked against direct references."""

import math
import random

import pytest
import torch

from qdrift.organism.tokenizer import build_tokenizer
from qdrift.organism.train import make_batch, model_config, numeric_embedding_init


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
