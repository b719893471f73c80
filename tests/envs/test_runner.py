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


@pytest.mark.parametrize("horizon", [4, 1], ids=["mid-episode", "on-its-last-turn"])
def test_a_row_whose_cache_pages_fail_the_check_ends_its_episode_and_the_others_run_as_without_it(horizon):
    clean_eps, clean_steps = run_episodes(policy(paged_kv=True), envs(3, horizon=horizon))
    p = policy(paged_kv=True)
    respond, turns = p.respond, []

    def respond_then_corrupt(rows):
        out = respond(rows)
        turns.append(rows)
        if len(turns) == 1:  # after the first turn: the allocator hands row 1's first page to row 0
            p._session.cache.pool.inject("reassign", row=1, page_index=0, other=0)
        return out

    p.respond = respond_then_corrupt
    eps, steps = run_episodes(p, envs(3, horizon=horizon))  # horizon 1: two turns, the second its last
    assert eps[1].stop_reason == "kv_integrity" and not eps[1].success and eps[1].steps == 2
    bad = [s for s in steps if s.episode == 1][-1]
    assert bad.stop_reason == "kv_integrity" and "request 1" in bad.policy_error
    for r in (0, 2):
        assert [s.raw for s in steps if s.episode == r] == [s.raw for s in clean_steps if s.episode == r]
        assert eps[r].stop_reason == clean_eps[r].stop_reason


class Scripted:
    """A policy that answers each turn with the next of `texts` (the hermes format)."""

    def __init__(self, texts):
        from qdrift.envs.parsers import get_parser

        self.texts = list(texts)
        self.prompt = type("Prompt", (), {"parser": get_parser("hermes")})()

    def start(self, conversations, episode_seeds, policy_seeds=None):
        pass

    def extend(self, row, messages, tools):
        pass

    def respond(self, rows):
        from qdrift.backends.generation import Generation

        text = self.texts.pop(0)
        return {r: Generation(text, [], 0.0, 1, 1, "eos") for r in rows}


def test_a_turn_with_no_call_is_not_valid_json_and_a_malformed_first_call_is_not_rescued_by_a_second():
    env = make_environment("ledger", horizon=3, seed=1_000_000)
    env.reset()
    amount = env.oracle().arguments["amount"]
    right = f'<tool_call>\n{{"name": "apply", "arguments": {{"amount": {amount}}}}}\n</tool_call>'
    broken = right.replace("}}", "}", 1)
    turns = ["I will apply the amount.", broken + "\n" + right, right, "out of turns"]
    _, steps = run_episodes(Scripted(turns), [make_environment("ledger", horizon=3, seed=1_000_000)])
    prose, malformed, good, _ = steps
    assert not prose.json_valid and not prose.schema_valid and not prose.correct and prose.call is None
    assert not malformed.json_valid and not malformed.correct and malformed.call is None
    assert malformed.parse_error.startswith("invalid JSON in <tool_call>")
    assert good.json_valid and good.schema_valid and good.correct


def test_stop_reason_tells_the_environments_end_from_running_out_of_turns():
    def call(name, **args):
        import json

        return f'<tool_call>\n{json.dumps({"name": name, "arguments": args})}\n</tool_call>'

    env = make_environment("ledger", horizon=2, seed=1_000_000)
    env.reset()
    amounts = [env.oracle().arguments["amount"]]
    env.step(env.oracle())
    amounts.append(env.oracle().arguments["amount"])
    applied = [call("apply", amount=a) for a in amounts]
    cases = {  # turns -> (stop_reason, success)
        "answered right": (applied + [call("finish", balance=env.start + sum(amounts))], ("done", True)),
        "answered wrong": (applied + [call("finish", balance=-1)], ("done", False)),
        "never answered": (applied + [call("apply", amount=1)], ("max_steps", False)),
        "no call at all": (["nothing"] * 3, ("max_steps", False)),
    }
    for what, (turns, want) in cases.items():
        (episode,), _ = run_episodes(Scripted(turns), [make_environment("ledger", horizon=2, seed=1_000_000)])
        assert (episode.stop_reason, episode.success) == want, what
        assert episode.steps == 3, what
