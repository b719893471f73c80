"""Training episodes are the runner's token stream with loss on the calls, drawn as a pure function of the step."""

import pytest

from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import DEV_SEEDS_FROM, make_environment
from qdrift.finetune.data import draw, encode_conversation, episode
from qdrift.organism.data import oracle_conversation
from qdrift.tiny import tiny_tokenizer
from tests.finetune.conftest import tiny_config


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


@pytest.mark.parametrize("parser", ["pythonic", "hermes"])
@pytest.mark.parametrize("name", ["pointer_chase", "dict_sum", "file_system"])
def test_episode_is_the_rendered_conversation_with_each_call_and_eos_as_targets(tok, parser, name):
    prompt = tool_prompt_for(tok, mode="prompted", parser=parser)
    env = make_environment(name, horizon=4, seed=7)
    ids, targets = encode_conversation(tok, prompt, env)
    messages = oracle_conversation(make_environment(name, horizon=4, seed=7), prompt.parser)
    full = prompt.render(tok, messages, env.tools(), add_generation_prompt=False)
    text = tok.decode(ids, skip_special_tokens=False)
    assert full.startswith(text) and text.endswith(tok.eos_token)
    assert full[len(text):].strip() == ""  # only the template's trailing newline is left
    calls = [m["content"] for m in messages if m["role"] == "assistant"]
    spans, current = [], []
    for i, t in zip(ids, targets, strict=True):
        if t:
            current.append(i)
            if i == tok.eos_token_id:
                spans.append(current)
                current = []
    assert spans == [tok(c, add_special_tokens=False).input_ids + [tok.eos_token_id] for c in calls]


def test_the_prompt_is_tokenized_alone_as_the_runner_prefills_it(tok):
    prompt = tool_prompt_for(tok, mode="prompted", parser="pythonic")
    env = make_environment("ledger", horizon=3, seed=1)
    ids, targets = encode_conversation(tok, prompt, env)
    first = make_environment("ledger", horizon=3, seed=1)
    text = prompt.render(tok, first.reset(), first.tools(), add_generation_prompt=True)
    assert ids[:targets.index(True)] == tok(text, add_special_tokens=False).input_ids


def test_draws_are_a_pure_function_of_seed_step_and_index_and_stay_below_the_calibration_seeds():
    cfg = tiny_config()
    a = [draw(cfg, s, i) for s in range(20) for i in range(2)]
    assert a == [draw(cfg, s, i) for s in range(20) for i in range(2)]
    assert all(seed < DEV_SEEDS_FROM for _, _, seed, _ in a)
    assert {env for env, *_ in a} == {"pointer_chase", "dict_sum"}
    assert all(1 <= h <= 3 for env, h, _, _ in a if env == "pointer_chase")
    assert {k["vmax"] for env, _, _, k in a if env == "dict_sum"} == {3, 9}
    assert draw(tiny_config(seed=1), 0, 0) != draw(cfg, 0, 0) or draw(tiny_config(seed=1), 1, 0) != draw(cfg, 1, 0)


def test_max_tokens_cuts_an_episode(tok):
    cfg = tiny_config(max_tokens=64)
    prompt = tool_prompt_for(tok, mode="prompted", parser="pythonic")
    e = episode(cfg, tok, prompt, 0, 0)
    assert len(e.ids) == 64 == len(e.targets)
