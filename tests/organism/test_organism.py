"""The shipped organism: it loads offline, and it acts in the environment it was trained on."""

import pytest
import torch

from qdrift.backends.hf import HFPolicy
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment
from qdrift.envs.runner import run_episodes
from qdrift.organism import WEIGHTS, load_organism
from qdrift.organism.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def organism():
    torch.set_num_threads(2)
    return load_organism()


def test_weights_are_small_bf16_safetensors():
    path = WEIGHTS / "model.safetensors"
    assert path.stat().st_size < 12 * 2**20
    from safetensors import safe_open

    with safe_open(path, "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


def test_shipped_tokenizer_matches_the_builder(organism):
    _, tok = organism
    built = build_tokenizer()
    text = "Start key: k17. 3/7 n5 -45 f12 red <|im_end|>"
    assert tok(text).input_ids == built(text).input_ids
    assert tok.chat_template == built.chat_template


def test_it_solves_heldout_pointer_chase_episodes(organism):
    model, tok = organism
    envs = [make_environment("pointer_chase", horizon=16, seed=TRAIN_SEEDS_BELOW + 500 + i, split="eval")
            for i in range(8)]
    episodes, steps = run_episodes(HFPolicy(model, tok, tool_prompt_for(tok), max_new_tokens=24), envs)
    lookups = [s for s in steps if '"lookup"' in (s.oracle or "")]
    assert sum(s.correct for s in lookups) >= 0.95 * len(lookups)
    assert all(s.schema_valid for s in steps)
    # the final answer call too: whole episodes succeed at this horizon (20 of 20 in the model card)
    assert sum(e.success for e in episodes) >= 7, [e.first_error_step for e in episodes]


def test_evaluate_defaults_to_the_trained_formats_of_the_model_card(tmp_path, capsys):
    import json
    import re

    from qdrift.organism.evaluate import ORGANISM_ENVS, main

    card = (WEIGHTS / "MODEL_CARD.md").read_text()
    command = re.search(r"`python -m qdrift\.organism\.evaluate --envs (.*?) --horizons", card, re.S).group(1)
    assert tuple(command.split()) == ORGANISM_ENVS
    main(["--horizons", "1", "--seeds", "1", "--out", str(tmp_path / "e.jsonl")])
    rows = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert tuple(r["env"] for r in rows) == ORGANISM_ENVS
    assert all(r["success"] == 1.0 for r in rows), rows  # horizon 1, in distribution: 1.00 in the card
