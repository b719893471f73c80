"""Nucleus sampling in the batched session: the nucleus of a vanishing top_p is the argmax token alone."""

from qdrift.backends.hf import HFPolicy
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import make_environment
from qdrift.envs.runner import run_episodes
from qdrift.tiny import tiny_model, tiny_tokenizer


def run(**kw):
    model, tok = tiny_model("llama").eval(), tiny_tokenizer()
    prompt = tool_prompt_for(tok, mode="prompted", parser="pythonic")
    envs = [make_environment("ledger", horizon=2, seed=1_000_000 + i) for i in range(2)]
    return [s.raw for s in run_episodes(HFPolicy(model, tok, prompt, max_new_tokens=6, **kw), envs)[1]]


def test_a_tiny_nucleus_samples_the_greedy_tokens_and_a_full_one_does_not():
    greedy = run()
    assert run(temperature=1.5, top_p=1e-9, seed=3) == greedy
    assert run(temperature=1.5, top_p=1.0, seed=3) != greedy


def test_top_p_out_of_range_is_refused():
    import pytest

    model, tok = tiny_model("llama").eval(), tiny_tokenizer()
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        HFPolicy(model, tok, tool_prompt_for(tok), top_p=0.0)
