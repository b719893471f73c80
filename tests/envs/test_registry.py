"""Loading environments by name and by path, and the train/held-out seed split."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import qdrift
from qdrift.envs import registry
from qdrift.envs.base import Environment, ToolCall
from qdrift.envs.registry import (
    TRAIN_SEEDS_BELOW,
    agents_dir,
    is_heldout,
    load_environment,
    make_environment,
)

CUSTOM = '''
from qdrift.envs.base import ToolCall
from qdrift.envs.schema import function_tool
from qdrift.envs.toolenv import Knob, ToolEnv


class Echo(ToolEnv):
    name = "echo"
    knobs = {"nmax": Knob(99, 1, 10**6, "numbers are in 0..nmax")}

    def build(self, rng):
        self.numbers = [rng.randint(0, self.knob("nmax")) for _ in range(self.horizon)]

    def make_tools(self):
        return [function_tool("say", "Say one number.", {"n": {"type": "integer"}})]

    def task(self):
        return "Say these numbers in order:\\n" + "\\n".join(f"{i}: {n}" for i, n in enumerate(self.numbers, 1))

    def perfect_steps(self):
        return self.horizon

    def init_state(self):
        self.said = []

    def expected(self):
        return ToolCall("say", {"n": self.numbers[min(len(self.said), self.horizon - 1)]})

    def apply(self, call):
        self.said.append(call.arguments["n"])
        return f"{len(self.said)}/{self.horizon} ok", len(self.said) >= self.horizon

    def success(self):
        return self.said == self.numbers
'''


def test_agents_dir_is_next_to_the_package():
    assert agents_dir() == Path(qdrift.__file__).resolve().parents[1] / "agents"
    assert not (agents_dir() / "__init__.py").exists()


@pytest.mark.parametrize("name", registry.available())
def test_load_builtin_by_name_and_by_path(name):
    cls = load_environment(name)
    assert cls.name == name
    file_name, class_name = registry.BUILTIN[name]
    by_path = load_environment(f"{agents_dir() / file_name}@{class_name}")
    assert by_path is cls  # the same file loads once
    assert isinstance(make_environment(name, 3, 0), Environment)


def test_load_custom_environment_from_path(tmp_path, monkeypatch):
    (tmp_path / "echo.py").write_text(CUSTOM)
    env = make_environment(f"{tmp_path / 'echo.py'}@Echo", horizon=5, seed=0, nmax=9)
    assert isinstance(env, Environment) and env.max_steps == 5
    while True:
        r = env.step(env.oracle())
        assert r.correct
        if r.done:
            break
    assert env.success()
    monkeypatch.chdir(tmp_path)
    assert load_environment("echo.py@Echo") is type(env)  # relative to the working directory
    assert env.step(ToolCall("say", {"n": "x"})).observation.startswith("error:")


def test_readme_example_runs(tmp_path):
    readme = (agents_dir() / "README.md").read_text()
    assert readme.startswith("# agents\nEnvironment definitions, loaded by path")
    code = readme.split("```python\n# my_envs/echo.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "echo.py").write_text(textwrap.dedent(code))
    env = make_environment(f"{tmp_path}/echo.py@Echo", horizon=4, seed=1)
    for _ in range(env.max_steps):
        r = env.step(env.oracle())
    assert r.done and env.success()


def test_unknown_name_suggests():
    with pytest.raises(ValueError, match=r"Unknown environment 'ledgr'\. Did you mean 'ledger'\? Available: "
                                         r"dict_sum, file_system, graph_nav, ledger, pointer_chase"):
        load_environment("ledgr")
    with pytest.raises(ValueError, match=r"Unknown environment 'zzzz'\. Available: "):
        load_environment("zzzz")


def test_bad_path_references(tmp_path):
    (tmp_path / "echo.py").write_text(CUSTOM)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_environment(f"{tmp_path}/missing.py@Echo")
    with pytest.raises(ValueError, match="no class 'Nope'.*classes defined there: Echo"):
        load_environment(f"{tmp_path}/echo.py@Nope")
    with pytest.raises(ValueError, match="path/to/file.py@ClassName"):
        load_environment(f"{tmp_path}/echo.py@")
    (tmp_path / "plain.py").write_text("class NotAnEnv:\n    pass\n")
    with pytest.raises(TypeError, match="missing method"):
        load_environment(f"{tmp_path}/plain.py@NotAnEnv")


def test_missing_agents_folder_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "agents_dir", lambda: tmp_path / "agents")
    with pytest.raises(FileNotFoundError, match="agents/ folder.*does not exist"):
        load_environment("ledger")


def test_seed_split():
    assert TRAIN_SEEDS_BELOW == 1_000_000
    assert not is_heldout(0) and not is_heldout(999_999) and is_heldout(1_000_000)
    make_environment("ledger", 2, 5, split="train")
    make_environment("ledger", 2, 1_000_000, split="eval")
    with pytest.raises(ValueError, match="held-out"):
        make_environment("ledger", 2, 1_000_000, split="train")
    with pytest.raises(ValueError, match="training seed"):
        make_environment("ledger", 2, 5, split="eval")
    with pytest.raises(ValueError, match="split must be"):
        make_environment("ledger", 2, 5, split="test")
