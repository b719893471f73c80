"""Sweep files: validated whole before any cell runs; every error names its line and the valid choices."""

import re

import pytest

from qdrift.repo_paths import shared_data_dir
from qdrift.sweep import SweepError, default_sweep_path, load_sweep, parse_sweep, resolve_sweep_file

GOOD = """\
name: t
models: [tiny:llama]
specs:
  - baseline
  - w8-a16-kv:16
tasks:
  - kind: agent
    env: ledger
    horizons: [1, 2]
    seeds: 2
"""


def problems(text: str) -> list[str]:
    with pytest.raises(SweepError) as info:
        parse_sweep(text, source="s.yaml")
    return info.value.problems


def test_a_good_file_parses_to_canonical_specs_and_held_out_seeds():
    sweep = parse_sweep(GOOD.replace("w8-a16-kv:16", "w8c-a16-kv:16"))
    assert sweep.specs == ("baseline", "w8-a16-kv:16")
    assert sweep.tasks[0].seeds == (1_000_000, 1_000_001) and sweep.tasks[0].horizons == (1, 2)


@pytest.mark.parametrize("old, new, line, message", [
    ("name: t", "nmae: t", 1, "unknown key 'nmae' (did you mean 'name'?); valid keys: name, description, models"),
    ("models: [tiny:llama]", "models: [/no/such/model]", 2, "models: model '/no/such/model' is not 'organism'"),
    ("models: [tiny:llama]", "models: [tiny:lama]", 2, "unknown tiny architecture 'lama'"),
    ("  - w8-a16-kv:16", "  - w99-a16-kv:16", 5, "specs: bad spec 'w99-a16-kv:16'"),
    ("    env: ledger", "    env: ledgr", 8, "Unknown environment 'ledgr'. Did you mean 'ledger'? Available:"),
    ("    horizons: [1, 2]", "    horizons: [0, 2]", 9, "horizons: must be a non-empty list of at most 1000 integers in 1..100000"),
    ("    horizons: [1, 2]", "    horizons: [1, 100000]", 9, "maximum horizon"),
    ("    seeds: 2", "    seeds: [3, 4]", 10, "seeds: seed 3 is a training seed"),
    ("    seeds: 2", "    seeds: 2\n    knobs: {nope: 1}", 11, "tasks[0].knobs: unknown knob 'nope' for ledger; valid knobs:"),
    ("    seeds: 2", "    seeds: 2\n    horizon: 3", 11, "tasks[0].unknown key 'horizon' (did you mean 'horizons'?)"),
    ("  - kind: agent", "  - kind: agnet", 7, "unknown kind 'agnet' (did you mean 'agent'?); valid kinds: agent, short_form"),
    ("name: t", "name: t\nexecutor: rya", 2, "executor: unknown executor 'rya' (did you mean 'ray'?); valid executors: local, ray"),
    ("name: t", "name: t\nexecutor: ray\nworkers: 0", 3, "workers: must be an integer in 1..1024, got 0"),
    ("name: t", "name: t\nworkers: 4", 2, "workers: the local executor runs one cell at a time; set 'executor: ray'"),
    ("name: t", "name: t\nexecuter: ray", 2, "unknown key 'executer' (did you mean 'executor'?)"),
    ("    seeds: 2", "    seeds: 2\n    drift: yes please", 11, "tasks[0].drift: must be true or false, got 'yes please'"),
    # every count is bounded before anything is built (a billion seeds once reached 22 GB)
    ("    seeds: 2", "    seeds: 1000000000", 10, "tasks[0].seeds: at most 100,000 seeds per task, got 1,000,000,000"),
    ("    horizons: [1, 2]", "    horizons: [1, 1000000000]", 9, "integers in 1..100000, got [1, 1000000000]"),
    ("    seeds: 2", "    seeds: 2\n    max_new_tokens: 1000000000", 11, "max_new_tokens: must be an integer in 1..32768"),
    ("name: t", "name: t\nbatch: 1000000000", 2, "batch: must be an integer in 1..4096, got 1000000000"),
    # the name becomes <name>.sqlite: no folders, no way out
    ("name: t", "name: /etc/passwd", 1, "name: must be a file name of letters, digits"),
    ("name: t", "name: ../../outside", 1, "name: must be a file name of letters, digits"),
    ("name: t", "name: a..b", 1, "no '..'"),
])
def test_each_error_names_the_line_the_value_and_the_choices(old, new, line, message):
    assert old in GOOD
    found = problems(GOOD.replace(old, new))
    assert any(p.startswith(f"s.yaml:{line}: ") and message in p for p in found), found


def test_every_problem_is_reported_at_once():
    text = GOOD.replace("tiny:llama", "tiny:nope").replace("w8-a16-kv:16", "w99").replace("ledger", "ledgr")
    assert [p.split(":")[1] for p in problems(text)] == ["2", "5", "8"]


def test_a_bad_horizon_does_not_hide_a_bad_knob_in_the_same_task():
    text = GOOD.replace("    horizons: [1, 2]", "    horizons: [0, 2]").replace("    seeds: 2", "    seeds: 2\n    knobs: {nope: 1}")
    found = problems(text)
    assert [p.split(":")[1] for p in found] == ["9", "11"], found
    assert "unknown knob 'nope'" in found[1]


def test_missing_required_keys_and_bad_yaml_are_named():
    assert any("missing required key 'tasks'" in p for p in problems("models: [organism]\nspecs: [baseline]\n"))
    assert problems("models: [organism\n")[0].startswith("s.yaml:2: not valid YAML")
    assert "duplicate key 'models'" in problems("models: [organism]\nmodels: [organism]\n")[0]


def test_short_form_with_the_lmeval_runner_validates():
    sweep = parse_sweep(GOOD + "  - kind: short_form\n    runner: lmeval\n    task: gsm8k\n", source="s.yaml")
    assert sweep.tasks[1].runner == "lmeval"


def test_short_form_without_its_runner_names_what_is_missing(monkeypatch):
    from qdrift.sweep import shortform

    monkeypatch.setitem(shortform.PROVIDERS, "elsewhere", "qdrift.no_such_module")
    text = GOOD + "  - kind: short_form\n    runner: elsewhere\n    task: gsm8k\n"
    (p,) = problems(text)
    assert p.startswith("s.yaml:12: tasks[1].runner: short-form runner 'elsewhere' is not available")
    assert "qdrift.no_such_module" in p and "register('elsewhere', fn)" in p


def test_the_shipped_default_sweep_is_found_and_valid():
    assert resolve_sweep_file("default") == default_sweep_path()
    sweep = load_sweep(default_sweep_path())
    assert sweep.models == ("organism",) and sweep.specs[0] == "baseline" and len(sweep.specs) == 6
    agents = [t for t in sweep.tasks if t.kind == "agent"]
    assert agents and max(max(t.horizons) for t in agents) >= 64
    assert {t.task for t in sweep.tasks if t.kind == "short_form"} == {"organism_keys_mc", "organism_keys_gen"}
    with pytest.raises(FileNotFoundError, match="shipped sweep name"):
        resolve_sweep_file("nope.yaml")


def test_executor_and_workers_are_read_and_leave_the_cells_unchanged():
    from qdrift.sweep import unique_cells

    sweep = parse_sweep("executor: ray\nworkers: 3\n" + GOOD)
    assert (sweep.executor, sweep.workers) == ("ray", 3)
    assert (parse_sweep(GOOD).executor, parse_sweep(GOOD).workers) == ("local", None)
    assert [c.key for c in unique_cells(sweep)] == [c.key for c in unique_cells(parse_sweep(GOOD))]


def test_the_readme_sweep_example_passes_its_own_checks():
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if "tasks:" in b]
    assert blocks, "README.md has no sweep example"
    for block in blocks:
        sweep = parse_sweep(block, "README.md")
        assert sweep.models and sweep.specs and sweep.tasks


@pytest.mark.parametrize("block, message", [
    ("  - kind: short_form\n    runner: [lmeval]\n    task: gsm8k\n", "tasks[1].runner: must be a runner's name"),
    ("  - kind: short_form\n    task: gsm8k\n    options: {1: x, num_fewshot: 5}\n",
     "tasks[1].options: option names must be strings, got 1"),
    ("  - env: ledger\n    horizons: [1]\n    seeds: 1\n    prompt: {parser: [hermes]}\n",
     "tasks[1].prompt.parser: unknown format ['hermes']"),
])
def test_wrongly_typed_fields_are_problems_not_tracebacks(block, message):
    (p,) = problems(GOOD + block)
    assert message in p, p


def test_threads_must_be_a_positive_integer(capsys):
    from qdrift.cli import main

    with pytest.raises(SystemExit):
        main(["sweep", "run", "no-such-sweep.yaml", "--threads", "0"])  # refused before the file is read
    assert "must be an integer >= 1, got '0'" in capsys.readouterr().err


@pytest.mark.parametrize("seeds, knobs, ok", [(20, "", True), (200, "", False), (2, "\n    knobs: {entry: 3}", False)])
def test_seeds_that_would_repeat_a_finite_environments_instance_are_refused(seeds, knobs, ok):
    from tests.bfcl.conftest import requires_bfcl

    if requires_bfcl.args[0]:
        pytest.skip(requires_bfcl.kwargs["reason"])
    text = f"models: [organism]\nspecs: [baseline]\ntasks:\n  - env: bfcl_multi_turn\n    horizons: [1]\n    seeds: {seeds}{knobs}\n"
    if ok:
        assert len(parse_sweep(text).tasks[0].seeds) == seeds
        return
    found = problems(text)
    assert any("give the same bfcl_multi_turn instance (multi_turn_base_" in p and "ask for at most" in p for p in found), found


BARE_ENV = '''
from qdrift.envs.base import StepResult, ToolCall


class Bare:
    """An environment written from the protocol alone: no ToolEnv, so no max_horizon."""

    name = "bare"

    def __init__(self, horizon, seed, **knobs):
        self.horizon = self.max_steps = horizon
        self.done = False

    def tools(self):
        return []

    def reset(self):
        return [{"role": "user", "content": "call ok"}]

    def oracle(self):
        return ToolCall("ok", {})

    def step(self, call, raw=""):
        self.done = True
        return StepResult("done", True, True, True, None)

    def success(self):
        return self.done
'''


def test_an_environment_without_a_maximum_horizon_can_be_swept(tmp_path):
    (tmp_path / "bare.py").write_text(BARE_ENV)
    sweep = parse_sweep(f"models: [tiny:llama]\nspecs: [baseline]\ntasks:\n  - env: {tmp_path}/bare.py@Bare\n"
                        "    horizons: [1, 500]\n    seeds: 2\n")
    assert sweep.tasks[0].horizons == (1, 500)


@pytest.mark.parametrize("runner, task, message", [
    ("bfcl", "simple_typo", "Unknown BFCL category 'simple_typo'"),
    ("bfcl", "irrelevance", "BFCL category 'irrelevance' is not supported"),
    ("lmeval", "organism_keys_mcq", "no lm-eval task 'organism_keys_mcq'.*Did you mean 'organism_keys_mc'"),
    pytest.param("lmeval", "mmlu_local_anatomyy", "unknown MMLU subject 'anatomyy'",  # the run would fail on it
                 marks=pytest.mark.skipif(shared_data_dir() is None, reason="the MMLU subjects are read from the "
                                          "shared benchmark data (../shared/data or $QDRIFT_SHARED_DATA), absent here")),
])
def test_a_short_form_task_its_runner_does_not_know_is_refused_before_any_cell_runs(runner, task, message):
    pytest.importorskip("lm_eval")
    text = f"models: [organism]\nspecs: [baseline]\ntasks:\n  - kind: short_form\n    runner: {runner}\n    task: {task}\n"
    found = problems(text)
    assert any(re.search(message, p) and "tasks[0].task" in p for p in found), found


def test_a_file_that_is_not_utf8_is_one_error_naming_its_line(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(GOOD.replace("name: t", "name: t\ndescription: caf\xe9").encode("latin-1"))
    with pytest.raises(SweepError, match=r"latin1.yaml:2: not UTF-8 text: byte 0xe9 at offset \d+"):
        load_sweep(path)
