import pytest

from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment
from qdrift.organism.data import oracle_conversation, training_episode
from qdrift.organism.tokenizer import build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("name", ["pointer_chase", "ledger", "graph_nav", "file_system", "dict_sum"])
def test_sequence_is_the_rendered_conversation_with_calls_as_targets(tok, name):
    seq = training_episode(tok, name, horizon=6, seed=42)
    env = make_environment(name, horizon=6, seed=42)
    messages = oracle_conversation(env)
    text = tok.apply_chat_template(messages, tools=env.tools(), tokenize=False)
    assert tok.decode(seq.ids) == text
    # the target spans are exactly the assistant turns, each ending with the eos token
    spans, current = [], []
    for i, t in zip(seq.ids, seq.targets, strict=True):
        if t:
            current.append(i)
            if i == tok.eos_token_id:
                spans.append(tok.decode(current))
                current = []
    assert spans == [m["content"] + tok.eos_token for m in messages if m["role"] == "assistant"]
    assert not seq.targets[0]


def test_segments_are_tokenized_as_the_runner_feeds_them(tok):
    # The runner tokenizes the prompt up to the generation prompt on its own; the first call's
    # tokens must start right after those ids.
    seq = training_episode(tok, "ledger", horizon=3, seed=1)
    env = make_environment("ledger", horizon=3, seed=1)
    prompt_text = tok.apply_chat_template(env.reset(), tools=env.tools(), tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt_text, add_special_tokens=False).input_ids
    first = seq.targets.index(True)
    assert seq.ids[:first] == prompt_ids


def test_training_refuses_heldout_seeds(tok):
    with pytest.raises(ValueError, match="held out"):
        training_episode(tok, "ledger", horizon=3, seed=TRAIN_SEEDS_BELOW)


def test_dict_sum_calls_follow_their_working_and_a_user_environment_needs_none(tok):
    env = make_environment("dict_sum", horizon=3, seed=4)
    turns = [m["content"] for m in oracle_conversation(env) if m["role"] == "assistant"]
    note, call = turns[0].split("<tool_call>")
    assert note.endswith(f" = {env.totals[0]}\n") and f'"total": {env.totals[0]}' in call

    class Bare:  # a user's environment: the protocol only, no worked_note
        def __init__(self):
            self.inner = make_environment("ledger", horizon=2, seed=4)

        def __getattr__(self, name):
            if name == "worked_note":
                raise AttributeError(name)
            return getattr(self.inner, name)

    bare = [m["content"] for m in oracle_conversation(Bare()) if m["role"] == "assistant"]
    assert bare[0].startswith("<tool_call>")
