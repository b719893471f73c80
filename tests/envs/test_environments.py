"""The five built-in environments: perfect agents, determinism, the conditional oracle, malformed calls."""

from __future__ import annotations

import json

import pytest

from qdrift.envs.base import Environment, StepResult, ToolCall
from qdrift.envs.registry import available, make_environment
from qdrift.envs.schema import call_text

NAMES = ["pointer_chase", "ledger", "graph_nav", "file_system", "dict_sum"]
HORIZONS = [1, 2, 7, 200]
SEEDS = [0, 1, 1_000_007]


def run_perfect(env, limit: int | None = None) -> list[tuple[ToolCall, StepResult]]:
    out = []
    for _ in range(limit or env.max_steps + 5):
        call = env.oracle()
        result = env.step(call)
        out.append((call, result))
        if result.done:
            break
    return out


def trajectory(name, horizon, seed, **knobs):
    env = make_environment(name, horizon, seed, **knobs)
    messages = env.reset()
    steps = [(call_text(c), r.observation) for c, r in run_perfect(env)]
    return messages, env.tools(), steps


def test_all_builtins_listed():
    assert sorted(NAMES) == available()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("horizon", HORIZONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_perfect_agent_succeeds_in_max_steps(name, horizon, seed):
    env = make_environment(name, horizon, seed)
    assert isinstance(env, Environment)
    assert (env.name, env.horizon, env.seed) == (name, horizon, seed)
    messages = env.reset()
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all(isinstance(m["content"], str) and m["content"] for m in messages)
    steps = run_perfect(env)
    assert len(steps) == env.max_steps
    assert all(r.correct and r.valid and r.error is None for _, r in steps)
    assert [r.done for _, r in steps] == [False] * (len(steps) - 1) + [True]
    assert env.success()
    assert env.max_steps in (horizon, horizon + 1)


@pytest.mark.parametrize("name", NAMES)
def test_reset_restarts_the_same_episode(name):
    env = make_environment(name, 7, 3)
    first = [(call_text(c), r.observation) for c, r in run_perfect(env)]
    env.reset()
    assert not env.success()
    again = [(call_text(c), r.observation) for c, r in run_perfect(env)]
    assert first == again and env.success()


@pytest.mark.parametrize("name", NAMES)
def test_tool_schemas_are_openai_functions(name):
    env = make_environment(name, 3, 0)
    for tool in env.tools():
        assert tool["type"] == "function"
        fn = tool["function"]
        assert fn["name"] and fn["description"]
        assert fn["parameters"]["type"] == "object"
        assert fn["parameters"]["additionalProperties"] is False
    json.dumps(env.tools())


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_and_seed_dependent(name):
    a = trajectory(name, 7, 5)
    assert a == trajectory(name, 7, 5)
    assert a != trajectory(name, 7, 6)
    assert trajectory(name, 7, 5) != trajectory(name, 7, 1_000_005)


@pytest.mark.parametrize("name", NAMES)
def test_shorter_task_is_prefix_of_longer(name):
    short = [c for c, _ in trajectory(name, 7, 11)[2]]
    long = [c for c, _ in trajectory(name, 200, 11)[2]]
    assert short[:7] == long[:7]  # the 7 execution steps; the final answer differs in general


@pytest.mark.parametrize("name", NAMES)
def test_knobs_change_the_task_and_are_deterministic(name):
    knob = {"pointer_chase": {"distractors": 3}, "ledger": {"amax": 5}, "graph_nav": {"nodes": 4, "colors": 2},
            "file_system": {"files": 2, "maxlen": 6}, "dict_sum": {"k": 3, "keys": 5, "vmax": 2}}[name]
    a = trajectory(name, 20, 0, **knob)
    assert a == trajectory(name, 20, 0, **knob)
    assert a != trajectory(name, 20, 0)
    env = make_environment(name, 20, 0, **knob)
    run_perfect(env)
    assert env.success()


# -- a wrong step is incorrect, and the oracle then follows the state the agent produced ---------------

def test_pointer_chase_wrong_key_is_followed():
    env = make_environment("pointer_chase", 7, 2)
    first = env.oracle()
    decoy = next(k for k in env.table if k not in env.chain)
    r = env.step(ToolCall("lookup", {"key": decoy}))
    assert r.valid and not r.correct and not r.done and r.error
    assert r.observation == f"{env.table[decoy]}; next 2"
    assert env.oracle() == ToolCall("lookup", {"key": env.table[decoy]}) != first
    r = env.step(ToolCall("lookup", {"key": "k99999999"}))  # not in the table: nothing changes
    assert r.valid and not r.correct and "not found" in r.observation
    assert env.oracle() == ToolCall("lookup", {"key": env.table[decoy]})


def test_ledger_wrong_amount_is_followed():
    env = make_environment("ledger", 7, 0)
    a0 = env.amounts[0]
    r = env.step(ToolCall("apply", {"amount": a0 + 1}))
    assert r.valid and not r.correct and r.observation == f"bal {env.start + a0 + 1}; next 2"
    assert env.oracle() == ToolCall("apply", {"amount": env.amounts[1]})
    steps = run_perfect(env)
    assert all(r.correct for _, r in steps) and len(steps) == 7
    assert steps[-1][0] == ToolCall("finish", {"balance": env.final + 1})
    assert not env.success()


def test_ledger_true_balance_succeeds_even_after_a_wrong_step():
    env = make_environment("ledger", 3, 0)
    env.step(ToolCall("apply", {"amount": 0}))
    env.step(env.oracle())
    env.step(env.oracle())
    r = env.step(ToolCall("finish", {"balance": env.final}))
    assert not r.correct and r.done and env.success()  # success checks the true answer, steps the conditional one


def test_graph_nav_wrong_colour_is_followed():
    env = make_environment("graph_nav", 7, 4)
    other = next(c for c in env.colors if c != env.route[0])
    r = env.step(ToolCall("move", {"color": other}))
    assert r.valid and not r.correct
    reached = env.graph[env.start][other]
    assert r.observation == f"{reached}; next 2" and env.at == reached
    assert env.oracle() == ToolCall("move", {"color": env.route[1]})
    steps = run_perfect(env)
    assert all(r.correct for _, r in steps)
    end = env.walk(env.start, [other, *env.route[1:]])
    assert steps[-1][0] == ToolCall("answer", {"node": end})
    assert env.success() == (end == env.target)


def test_file_system_wrong_operation_is_scored_and_next_op_follows():
    env = make_environment("file_system", 7, 0)
    r = env.step(ToolCall("read", {"path": "nope"}))
    assert r.valid and not r.correct and r.observation == "nope not found; next 2"
    assert env.oracle() == env.ops[1]
    steps = run_perfect(env)
    assert all(r.correct for _, r in steps) and len(steps) == 6
    assert not env.success()  # op 1 was never done


def test_file_system_errors_are_observations():
    env = make_environment("file_system", 7, 0, slack=3)
    assert env.step(ToolCall("rename", {"src": "zz", "dst": "yy"})).observation == "zz not found; next 2"
    assert env.step(ToolCall("create", {"path": "a", "content": "x"})).observation == "ok; next 3"
    assert env.step(ToolCall("create", {"path": "b", "content": "y"})).observation == "ok; next 4"
    assert env.step(ToolCall("rename", {"src": "a", "dst": "b"})).observation == "b exists; next 5"
    assert env.step(ToolCall("append", {"path": "a", "content": "z"})).observation == "ok; next 6"
    assert env.step(ToolCall("read", {"path": "a"})).observation == "xz; next 7"
    assert env.fs == {"a": "xz", "b": "y"}


@pytest.mark.parametrize("maxlen", [4, 12, 20])
def test_file_system_words_are_whole_contents_and_files_stay_within_maxlen(maxlen):
    from agents.file_system import CONTENT_WORDS

    env = make_environment("file_system", 200, 4, words=1, maxlen=maxlen)
    contents = [op.arguments["content"] for op in env.ops if op.name in ("create", "append")]
    assert contents and set(contents) <= set(CONTENT_WORDS)
    assert any(op.name == "append" for op in env.ops) == (maxlen >= 8)
    run_perfect(env)
    assert env.success() and all(len(v) <= maxlen for v in env.fs.values())
    letters = make_environment("file_system", 200, 4, maxlen=maxlen)  # the default: three random letters
    assert all(len(op.arguments["content"]) == 3 and op.arguments["content"] not in CONTENT_WORDS
               for op in letters.ops if op.name in ("create", "append"))


def test_file_system_words_need_room_for_one_word():
    with pytest.raises(ValueError, match=r"maxlen=3 is shorter than one content .*valid: maxlen >= 4"):
        make_environment("file_system", 5, 0, words=1, maxlen=3)
    make_environment("file_system", 5, 0, maxlen=3)


@pytest.mark.parametrize("name", ["ledger", "graph_nav", "file_system"])
def test_echo_puts_each_steps_item_right_before_its_call_the_first_one_included(name):
    env = make_environment(name, 6, 2, echo=1)
    task = env.reset()[1]["content"]
    assert task == make_environment(name, 6, 2).reset()[1]["content"] + f"\nnext 1: {env.item(0)}"
    shown = [task]
    for _ in range(6):
        shown.append(env.step(env.oracle()).observation)
    for i in range(6):
        assert shown[i].endswith(f"next {i + 1}: {env.item(i)}"), (i, shown[i])
    assert shown[6].endswith("all 6 done")


def test_dict_sum_oracle_follows_reported_total():
    env = make_environment("dict_sum", 7, 0, k=2)
    r = env.step(ToolCall("report", {"total": 1000}))
    assert r.valid and not r.correct and r.observation == env.turn_text(1)
    assert env.oracle() == ToolCall("report", {"total": 1000 + sum(env.table[k] for k in env.turns[1])})
    steps = run_perfect(env)
    assert all(r.correct for _, r in steps) and len(steps) == 6
    assert not env.success()
    assert env.reports[-1] == env.totals[-1] - env.totals[0] + 1000


def test_dict_sum_worked_note_shows_values_and_partial_sums():
    env = make_environment("dict_sum", 7, 0, k=2)
    env.step(ToolCall("report", {"total": 1000}))  # the note starts from the agent's own total
    a, b = env.turns[1]
    va, vb = env.table[a], env.table[b]
    assert env.worked_note() == f"{a}={va} {b}={vb} 1000 {va} = {1000 + va} {vb} = {1000 + va + vb}\n"
    assert env.oracle().arguments["total"] == 1000 + va + vb


def test_dict_sum_keyspace_draws_distinct_keys_in_random_order():
    env = make_environment("dict_sum", 30, 5, keyspace=1000)
    keys = [int(k[1:]) for k in env.table]
    assert len(keys) == 20 == len(set(keys)) and all(0 <= k < 1000 for k in keys)
    assert keys != sorted(keys) and max(keys) >= 20
    assert all(k in env.table for turn in env.turns for k in turn)
    assert all(r.correct for _, r in run_perfect(env)) and env.success()
    with pytest.raises(ValueError, match=r"keyspace=10 has fewer keys than the table's keys=20; valid: 0 .* or keyspace >= keys"):
        make_environment("dict_sum", 3, 0, keyspace=10)


def test_a_knob_added_later_leaves_earlier_instances_alone_at_its_default():
    from qdrift.envs.toolenv import Knob

    cls = type(make_environment("dict_sum", 1, 0))
    # dict_sum as it was before `keyspace`: no such knob, so the table is always k0..k{keys-1}
    older = type("OlderDictSum", (cls,), {"knobs": {k: v for k, v in cls.knobs.items() if k != "keyspace"},
                                          "knob": lambda self, k: 0 if k == "keyspace" else self.settings[k],
                                          "check_settings": lambda self: None})
    for seed in (0, 7, 123):
        assert make_environment("dict_sum", 9, seed).table == older(9, seed).table
        assert make_environment("dict_sum", 9, seed).turns == older(9, seed).turns
    seeded = type("Seeded", (cls,), {"knobs": {**cls.knobs, "keyspace": Knob(0, 0, 1000)}})
    assert seeded(9, 0).turns != older(9, 0).turns  # an ordinary knob is part of the seed material


def test_pointer_chase_digits_fixes_the_key_length_and_leaves_older_instances_alone():
    import re

    env = make_environment("pointer_chase", 64, 5, digits=7)
    keys = set(env.table) | set(env.table.values())
    assert len(keys) > 65 and all(re.fullmatch(r"k[1-9]\d{6}", k) for k in keys)
    run_perfect(env)
    assert env.success()
    cls = type(env)
    # pointer_chase as it was before `digits`
    older = type("OlderPointerChase", (cls,), {"knobs": {"distractors": cls.knobs["distractors"]},
                                               "knob": lambda self, k: 0 if k == "digits" else self.settings[k],
                                               "check_settings": lambda self: None})
    for seed, d in ((0, 20), (7, 500), (123, 5000)):
        assert make_environment("pointer_chase", 64, seed, distractors=d).table == older(64, seed, distractors=d).table
    assert make_environment("pointer_chase", 3, 1, digits=1, distractors=0).chain[0] in {f"k{n}" for n in range(10)}


def test_pointer_chase_digits_must_leave_room_for_the_table():
    with pytest.raises(ValueError, match=r"digits=2 leaves too few keys for L \+ 1 \+ distractors = 85 .* valid: 0 or digits >= 3"):
        make_environment("pointer_chase", 64, 0, digits=2)


def test_copy_environments_write_no_working():
    for name in ["pointer_chase", "ledger", "graph_nav", "file_system"]:
        assert make_environment(name, 5, 0).worked_note() == ""


def test_dict_sum_first_turn_is_in_the_task():
    env = make_environment("dict_sum", 5, 0, k=3)
    task = env.reset()[1]["content"]
    assert task.endswith(env.turn_text(0)) and "k0=" in task


# -- malformed calls --------------------------------------------------------------------------------

def malformed_calls(env) -> list:
    want = env.oracle()
    key, value = next(iter(want.arguments.items()))
    wrong_type = str(value) if isinstance(value, int) else 123
    code = "__import__('os').system('touch PWNED')"
    return [
        None,
        ToolCall("nope", {}),
        ToolCall(want.name, {}),
        ToolCall(want.name, {**want.arguments, key: wrong_type}),
        ToolCall(want.name, {**want.arguments, "extra": 1}),
        ToolCall(want.name, {**want.arguments, key: code}) if isinstance(value, int) else ToolCall(code, {}),
        ToolCall(want.name, {**want.arguments, key: True}),
        ToolCall(want.name, "{not json"),  # arguments as a broken JSON string
        ToolCall(want.name, [1, 2]),
        ToolCall(123, {}),
        "lookup(k1)",
        {"name": code},
    ]


@pytest.mark.parametrize("name", NAMES)
def test_malformed_calls_are_error_observations(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = make_environment(name, 7, 0, slack=20)
    want = env.oracle()
    calls = malformed_calls(env)
    for call in calls:
        r = env.step(call, raw=str(call))
        assert r.observation.startswith("error: ") and r.error, call
        assert (r.valid, r.correct, r.done) == (False, False, False), call
        assert env.oracle() == want  # the state is unchanged
    assert not (tmp_path / "PWNED").exists()
    steps = run_perfect(env)  # the episode continues; slack leaves room for the wasted turns
    assert all(r.correct for _, r in steps) and env.success()


@pytest.mark.parametrize("name", NAMES)
def test_malformed_call_messages_name_tool_argument_and_expectation(name):
    env = make_environment(name, 7, 0)
    want = env.oracle()
    key, value = next(iter(want.arguments.items()))
    missing = env.step(ToolCall(want.name, {})).observation
    assert f"'{want.name}'" in missing and f"'{key}'" in missing and "missing" in missing and "expected" in missing
    typed = env.step(ToolCall(want.name, {**want.arguments, key: str(value) if isinstance(value, int) else 7}))
    assert f"'{want.name}'" in typed.observation and f"'{key}'" in typed.observation
    assert "expected" in typed.observation
    unknown = env.step(ToolCall("nope", {})).observation
    assert "unknown tool" in unknown and want.name in unknown


def test_malformed_call_uses_up_a_turn_without_slack():
    env = make_environment("ledger", 2, 0)
    assert env.max_steps == 3
    env.step(None)
    env.step(env.oracle())
    last = env.step(env.oracle())  # the third turn, its cap: the environment did not end it, the cap does
    assert not last.done and env.done and not env.success()
    assert env.step(env.oracle()).observation == "error: the episode is over"


@pytest.mark.parametrize("name", NAMES)
def test_step_after_done_does_not_raise(name):
    env = make_environment(name, 1, 0)
    run_perfect(env)
    r = env.step(env.oracle())
    assert r.done and not r.correct and r.observation.startswith("error:")
    assert env.step(None).done


# -- construction errors --------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("horizon", [0, -1, 10_001, 2.5, "7", True])
def test_bad_horizon(name, horizon):
    with pytest.raises(ValueError, match=r"horizon .*1\.\.10000"):
        make_environment(name, horizon, 0)


@pytest.mark.parametrize("name", NAMES)
def test_bad_knobs_and_seed(name):
    with pytest.raises(ValueError, match="unknown knob 'bogus'.*valid knobs: .*slack"):
        make_environment(name, 3, 0, bogus=1)
    with pytest.raises(ValueError, match=r"slack .*0\.\."):
        make_environment(name, 3, 0, slack=-1)
    with pytest.raises(ValueError, match=r"seed .*0\.\."):
        make_environment(name, 3, -5)
    knob, spec = next(iter(type(make_environment(name, 1, 0)).knobs.items()))
    with pytest.raises(ValueError, match=rf"{knob} .*{spec.lo}\.\.{spec.hi}"):
        make_environment(name, 3, 0, **{knob: spec.hi + 1})
    with pytest.raises(ValueError, match=rf"{knob} must be an integer"):
        make_environment(name, 3, 0, **{knob: "2"})


# -- compactness ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_steps_stay_compact_at_200(name, seed):
    env = make_environment(name, 200, seed)
    sizes = [len(call_text(c)) + len(r.observation) for c, r in run_perfect(env)]
    assert max(sizes) < 80, max(sizes)
    assert sum(sizes) / len(sizes) < 70
    assert len(env.reset()[1]["content"]) < 6000  # the task itself, all L items included


def test_same_episodes_across_processes_and_hash_seeds():
    import os
    import subprocess
    import sys

    code = (
        "import hashlib\n"
        "from qdrift.envs.registry import make_environment, available\n"
        "from qdrift.envs.schema import call_text\n"
        "out = []\n"
        "for n in available():\n"
        "    e = make_environment(n, 30, 7); out.append(str(e.reset()))\n"
        "    while True:\n"
        "        c = e.oracle(); r = e.step(c); out.append(call_text(c) + r.observation)\n"
        "        if r.done: break\n"
        "print(hashlib.sha1(''.join(out).encode()).hexdigest())\n"
    )
    digests = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": h}).stdout
        for h in ("1", "2")
    }
    assert len(digests) == 1
