"""The episode runner: every step scored, cache reused, batches equal single runs, no crash on garbage."""

import pytest

import qdrift
from qdrift.backends.hf import HFPolicy
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import make_environment
from qdrift.envs.runner import run_episodes
from qdrift.tiny import tiny_model, tiny_tokenizer


def policy(model=None, **kw):
    tok = tiny_tokenizer()
    return HFPolicy(model or tiny_model("llama"), tok, tool_prompt_for(tok), max_new_tokens=6, **kw)


def envs(n: int, horizon: int = 2):
    return [make_environment("ledger", horizon=horizon, seed=1_000_000 + i) for i in range(n)]


def test_a_model_that_never_calls_a_tool_gets_scored_invalid_steps_not_an_exception():
    episodes, steps = run_episodes(policy(), envs(2))
    assert [e.success for e in episodes] == [False, False]
    assert all(e.first_error_step == 0 for e in episodes)
    assert all(not s.schema_valid and not s.correct for s in steps)
    assert {e.steps for e in episodes} == {envs(1)[0].max_steps}
    assert all(s.observation.startswith("error") for s in steps)


def test_batched_episodes_match_episodes_run_one_by_one():
    together = run_episodes(policy(), envs(3))[1]
    alone = [s for i in range(3) for s in run_episodes(policy(), envs(3)[i:i + 1], first_id=i)[1]]
    key = lambda s: (s.episode, s.step)  # noqa: E731
    assert [s.raw for s in sorted(together, key=key)] == [s.raw for s in sorted(alone, key=key)]


def test_cache_reuse_feeds_each_token_once():
    p = policy()
    episodes, steps = run_episodes(p, envs(1, horizon=4))
    fed = sum(s.tokens_in for s in steps) + sum(s.tokens_out for s in steps)
    # The episode's very last token is never needed as input, so it is never run.
    assert p.tokens_fed == fed - 1, "every token enters the model exactly once"


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    a = run_episodes(policy(temperature=1.0, seed=1), envs(2))[1]
    b = run_episodes(policy(temperature=1.0, seed=1), envs(2))[1]
    c = run_episodes(policy(temperature=1.0, seed=2), envs(2))[1]
    assert [s.raw for s in a] == [s.raw for s in b] != [s.raw for s in c]


def test_quantized_policy_runs_episodes_on_a_quantized_cache():
    from qdrift.quant.kv import QuantizedKVLayerMixin

    model = qdrift.quantize(tiny_model("llama"), "w4g32-a8-kv:fp8e4m3@unit")
    p = policy(model)
    episodes, steps = run_episodes(p, envs(2))
    assert [e.steps for e in episodes] == [envs(1)[0].max_steps] * 2
    assert all(isinstance(layer, QuantizedKVLayerMixin) for layer in p._session.cache.layers)
    baseline = run_episodes(policy(), envs(2))[1]
    assert [s.raw for s in steps] != [s.raw for s in baseline], "quantization changed nothing the model wrote"


def test_tokenizer_without_pad_token_is_refused():
    tok = tiny_tokenizer()
    tok.pad_token = None
    with pytest.raises(ValueError, match="no pad token"):
        HFPolicy(tiny_model("llama"), tok, tool_prompt_for(tok))


def test_a_row_whose_cache_pages_fail_the_check_ends_its_episode_and_the_others_run_as_without_it():
    clean_eps, clean_steps = run_episodes(policy(paged_kv=True), envs(3, horizon=4))
    p = policy(paged_kv=True)
    respond, turns = p.respond, []

    def respond_then_corrupt(rows):
        out = respond(rows)
        turns.append(rows)
        if len(turns) == 1:  # after the first turn: the allocator hands row 1's first page to row 0
            p._session.cache.pool.inject("reassign", row=1, page_index=0, other=0)
        return out

    p.respond = respond_then_corrupt
    eps, steps = run_episodes(p, envs(3, horizon=4))
    assert eps[1].stop_reason == "kv_integrity" and not eps[1].success and eps[1].steps == 2
    bad = [s for s in steps if s.episode == 1][-1]
    assert bad.stop_reason == "kv_integrity" and "request 1" in bad.policy_error
    for r in (0, 2):
        assert [s.raw for s in steps if s.episode == r] == [s.raw for s in clean_steps if s.episode == r]
        assert eps[r].stop_reason == clean_eps[r].stop_reason
