"""BFCL multi-turn as an agent environment: ground-truth replay succeeds, mistakes are scored steps."""

from __future__ import annotations

import pytest

from qdrift.envs.base import Environment, ToolCall
from tests.bfcl.conftest import requires_bfcl

pytestmark = requires_bfcl


def env(entry, horizon=99, category="multi_turn_base"):
    from qdrift.envs.registry import make_environment

    return make_environment("bfcl_multi_turn", horizon, 0, entry=entry, category=category)


def replay(e):
    results = []
    while not e.done:
        results.append(e.step(e.oracle()))
    return results


@pytest.mark.parametrize("entry", [0, 60, 120, 180])
def test_replaying_the_ground_truth_scores_every_step_correct_and_succeeds(entry):
    e = env(entry)
    assert isinstance(e, Environment)
    results = replay(e)
    assert len(results) == e.horizon == sum(len(t) for t in e.truth_turns)
    assert all(r.correct and r.valid for r in results)
    assert e.success() and all(v["valid"] for v in e.turn_verdicts)


def test_long_context_replay_succeeds():
    e = env(5, category="multi_turn_long_context")
    assert all(r.correct for r in replay(e)) and e.success()


def test_a_wrong_call_is_a_scored_incorrect_step_and_fails_bfcls_check():
    e = env(0)  # multi_turn_base_0: first call cd(folder='document')
    first = e.oracle()
    assert first == ToolCall("cd", {"folder": "document"})
    r = e.step(ToolCall("cd", {"folder": "archive"}))
    assert r.valid and not r.correct and "expected" in r.error
    replay(e)
    assert not e.success() and not e.turn_verdicts[0]["valid"]


def test_unparseable_and_unknown_calls_are_invalid_steps_not_crashes():
    e = env(0)
    r = e.step(None)
    assert not r.valid and not r.correct and r.observation.startswith("error: no tool call")
    r = e.step(ToolCall("rm_everything", {}))
    assert not r.valid and "unknown tool" in r.observation


def test_positional_ground_truth_is_named_from_the_backend_signature():
    e = env(0)
    assert ToolCall("sort", {"file_name": "final_report.pdf"}) in e.flat_truth  # sort('final_report.pdf')


def test_default_arguments_count_as_given():
    e = env(1)  # multi_turn_base_1 starts with ls(a=True)
    assert e.oracle() == ToolCall("ls", {"a": True})
    assert not e.step(ToolCall("ls", {})).correct  # a defaults to False
    e.reset()
    assert e.step(ToolCall("ls", {"a": True})).correct


def test_horizon_caps_the_user_turns_and_seed_picks_the_entry():
    from qdrift.bfcl.multi_turn import load_multi_turn

    entries = load_multi_turn()
    e = env(0, horizon=1)
    assert len(e.turns) == 1 and e.horizon == len(e.truth_turns[0])
    assert replay(e)[-1].done and e.success()
    from qdrift.envs.registry import make_environment

    assert make_environment("bfcl_multi_turn", 2, 1_000_003).entry["id"] == entries[1_000_003 % len(entries)]["id"]
    with pytest.raises(ValueError, match="entry must be an integer in 0..196"):
        env(500)


def test_entries_without_calls_or_with_an_invalid_ground_truth_are_left_out():
    from qdrift.bfcl.multi_turn import load_multi_turn

    ids = {e["id"] for e in load_multi_turn()}
    assert len(ids) == 197 and "multi_turn_base_173" not in ids and "multi_turn_base_0" in ids


def test_episode_runner_drives_it_with_the_organism():
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.envs.runner import run_episodes
    from qdrift.organism import load_organism

    model, tok = load_organism()
    e = env(0, horizon=1)
    episodes, steps = run_episodes(HFPolicy(model, tok, tool_prompt_for(tok), max_new_tokens=24), [e])
    assert len(steps) == e.horizon and episodes[0].steps == e.horizon
    assert all(s.oracle and s.env == "bfcl_multi_turn" for s in steps)


def test_equal_numbers_are_the_same_argument():
    e = env(63)  # multi_turn_base_63: liter_to_gallon(liter=166), a "number" parameter
    assert e.oracle() == ToolCall("liter_to_gallon", {"liter": 166})
    assert e.step(ToolCall("liter_to_gallon", {"liter": 166.0})).correct
    e.reset()
    assert not e.step(ToolCall("liter_to_gallon", {"liter": 166.5})).correct


def test_a_result_too_large_to_print_is_an_execution_error_not_a_crash():
    e = env(15)  # a MathAPI entry
    r = e.step(ToolCall("power", {"base": 10, "exponent": 5000}))
    assert r.valid and r.observation.startswith("Error during execution")


@pytest.mark.parametrize("name, arguments, bound", [
    ("power", {"base": 10, "exponent": 10**12}, "computed up to 1,000,000 digits"),
    ("logarithm", {"value": 2, "base": 10, "precision": 10**9}, "above the 10,000 digits"),
    ("square_root", {"number": 2, "precision": 10**9}, "above the 10,000 digits"),
])
def test_a_call_that_would_not_finish_is_an_execution_error_never_computed(monkeypatch, name, arguments, bound):
    from qdrift.bfcl.multi_turn import backend_class

    called = []

    def computed(self, **kwargs):  # stands in for BFCL's method, which would run for hours
        called.append(kwargs)
        return {"result": 0}

    computed.__name__ = name
    monkeypatch.setattr(backend_class("MathAPI"), name, computed)
    e = env(15)  # a MathAPI entry
    r = e.step(ToolCall(name, arguments))
    assert not called and r.observation.startswith("Error during execution") and bound in r.observation


def test_calls_within_the_bounds_run_as_in_bfcl():
    e = env(15)
    assert e.step(ToolCall("power", {"base": 2, "exponent": 10})).observation.startswith('{"result": 1024}')
    assert e.step(ToolCall("power", {"base": 10, "exponent": 10.5**5})).observation.startswith(
        "Error during execution")  # a float power overflows at once, as in BFCL
    big = e.step(ToolCall("power", {"base": 10, "exponent": 999_999})).observation  # just under: computed
    assert "Exceeds the limit" in big  # ... and then too long to print, as before
    log = e.step(ToolCall("logarithm", {"value": 8, "base": 2, "precision": 10_000})).observation
    assert log.startswith("{'result': mpf('3.0"), log  # an mpf is not JSON: BFCL's str() of the dict


def test_bfcl_has_no_training_split_and_names_its_knobs():
    from qdrift.envs.registry import make_environment

    with pytest.raises(ValueError, match="no training split"):
        make_environment("bfcl_multi_turn", 1, 5, split="train")
    assert make_environment("bfcl_multi_turn", 1, 1_000_005, split="eval").entry_index >= 0
    with pytest.raises(ValueError, match="unknown knob.*slack.*category and entry"):
        make_environment("bfcl_multi_turn", 1, 5, slack=2)


def test_a_turn_without_any_call_fails_as_in_bfcls_checker():
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    from qdrift.bfcl.multi_turn import load_multi_turn

    entries = load_multi_turn("multi_turn_base")
    index = next(i for i, e in enumerate(entries) if e["id"] == "multi_turn_base_103")
    entry = entries[index]  # turn 1 only reads state, and its answer is among turn 0's results
    e = env(index)
    for t, turn in enumerate(e.truth_calls):
        for call in turn:
            e.step(None if t == 1 else call)  # no parseable call in turn 1
    # BFCL's own checker on the same play: the decoded calls per turn, none in turn 1
    decoded = [[list(calls)] if i != 1 else [] for i, calls in enumerate(entry["ground_truth"])]
    bfcl = multi_turn_checker(decoded, entry["ground_truth"], entry, "multi_turn_base", "qdrift-test")
    assert not bfcl["valid"] and bfcl["error_type"] == "multi_turn:empty_turn_model_response"
    assert [v["valid"] for v in e.turn_verdicts] == [True, False] + [True] * (len(e.turns) - 2)
    assert e.turn_verdicts[1]["error_type"] == "multi_turn:empty_turn_model_response" and not e.success()


def test_the_instance_key_of_a_seed_is_the_entry_its_episode_plays():
    # A sweep asks the classmethod for every seed instead of building each episode.
    from qdrift.envs.registry import make_environment

    for seed, knobs in [(0, {}), (5, {}), (196, {}), (197, {}), (3, {"entry": 40}), (7, {"category": "multi_turn_long_context"})]:
        env = make_environment("bfcl_multi_turn", 1, seed, **knobs)
        assert type(env).instance_key(seed=seed, **knobs) == env.entry["id"]
    env_class = type(env)
    for entry in (-1, 10_000, True):  # checked as the episode checks it, not wrapped round
        with pytest.raises(ValueError, match="entry must be an integer in 0.."):
            env_class.instance_key(seed=0, entry=entry)
