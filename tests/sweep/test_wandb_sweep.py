"""The W&B sweep configuration: valid by W&B's own schema, its grid is the sweep's cells, and the
command a `wandb agent` run builds from it runs one cell into the store."""

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from qdrift.cli import main
from qdrift.store import Store
from qdrift.sweep import parse_sweep, unique_cells
from qdrift.sweep.wandb_sweep import is_rectangular, select_cell, wandb_sweep_config

REPO = Path(__file__).resolve().parents[2]
# The 'sweeps' package's schema (MIT, see wandb_sweep_schema.LICENSE): the package itself pins numpy<2.
SCHEMA = json.loads((Path(__file__).parent / "data" / "wandb_sweep_schema.json").read_text())

TEXT = """\
name: wb
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: ledger
    horizons: [1, 2]
    seeds: 2
    max_new_tokens: 4
"""

RAGGED = TEXT + """\
  - env: pointer_chase
    horizons: [3]
    seeds: 1
  - env: ledger
    horizons: [1]
    seeds: 1
    knobs: {slack: 1}
"""


def validate(config: dict) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(config)]


def grid(config: dict) -> list[dict]:
    """Every agent run of a grid sweep: the cartesian product of the parameters' values."""
    names = list(config["parameters"])
    return [dict(zip(names, v, strict=True))
            for v in itertools.product(*(config["parameters"][n]["values"] for n in names))]


@pytest.mark.parametrize("text", [TEXT, RAGGED], ids=["rectangular", "ragged"])
def test_the_config_validates_and_its_grid_is_exactly_the_sweeps_cells(tmp_path, text):
    sweep = parse_sweep(text)
    config = wandb_sweep_config(sweep, tmp_path / "s.yaml", tmp_path / "s.sqlite")
    assert validate(config) == [] and config["method"] == "grid"
    assert ("horizon" in config["parameters"]) == is_rectangular(sweep)
    keys = [select_cell(sweep, **run).key for run in grid(config)]
    assert sorted(keys) == sorted(c.key for c in unique_cells(sweep))


def test_the_schema_rejects_what_wandb_would():
    config = wandb_sweep_config(parse_sweep(TEXT), "s.yaml", "s.sqlite")
    assert validate({**config, "method": "gird"})
    assert validate({**config, "parameters": {"model": {"values": "tiny:llama"}}})


def test_the_agent_command_runs_one_cell_into_the_store_and_a_rerun_skips_it(tmp_path, capsys):
    from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

    sweep_file, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep_file.write_text(TEXT)
    assert main(["sweep", "wandb-config", str(sweep_file), "--store", str(store),
                 "--out", str(tmp_path / "w.yaml")]) == 0
    import yaml

    config = yaml.safe_load((tmp_path / "w.yaml").read_text())
    run = {"model": "tiny:llama", "spec": "w8-a16-kv:16", "task": "ledger", "horizon": 2}
    # What wandb_agent.Agent._command_run does: expand the macros with wandb's own helpers.
    sweep_vars = create_sweep_command_args({"args": {k: {"value": v} for k, v in run.items()}})
    sweep_vars.update(env=["/usr/bin/env"], interpreter=[sys.executable])
    command = []
    for c in create_sweep_command(config["command"]):
        command += sweep_vars.get(c[2:-1]) or [] if c.startswith("${") and c.endswith("}") else [c]
    assert command[-4:] == ["--model=tiny:llama", "--spec=w8-a16-kv:16", "--task=ledger", "--horizon=2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    cell = select_cell(parse_sweep(TEXT), **run)
    assert f"tiny:llama w8-a16-kv:16 ledger L=2: done (cell {cell.key})" in done.stdout
    with Store(store) as s:
        assert [c["key"] for c in s.cells("done")] == [cell.key]
        assert len(s.rows("episode", [cell.key])) == 2
    # the same arguments again (in this process, to save a second start-up): the cell is not rerun
    assert main(command[command.index("qdrift.cli") + 1:]) == 0
    assert f"already done in {store} (cell {cell.key}); not run again" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--task", "ledger"], "task 'ledger' is an agent task: give --horizon, one of 1, 2"),
    (["--task", "ledger", "--horizon", "3"], "horizon 3 is not in sweep file .*s.yaml \\(task 'ledger'\\); "
                                             "valid horizons: 1, 2"),
    (["--task", "ledgr", "--horizon", "1"], "task 'ledgr' is not in sweep file .*; valid tasks: ledger"),
    (["--task", "ledger@1", "--horizon", "1"], "already names a horizon"),
])
def test_a_combination_not_in_the_file_is_refused_with_the_valid_choices(tmp_path, args, message):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(TEXT)
    with pytest.raises(SystemExit, match=message):
        main(["sweep", "cell", str(sweep_file), "--model", "tiny:llama", "--spec", "baseline", *args,
              "--store", str(tmp_path / "s.sqlite")])
    assert not (tmp_path / "s.sqlite").exists()


def test_specs_and_models_not_in_the_file_are_refused():
    sweep = parse_sweep(TEXT)
    with pytest.raises(ValueError, match="spec 'w4g32-a16-kv:16' is not in sweep file .*valid specs: baseline, w8"):
        select_cell(sweep, "tiny:llama", "w4g32-a16-kv:16", "ledger", 1)
    with pytest.raises(ValueError, match="model 'organism' is not in .*valid models: tiny:llama"):
        select_cell(sweep, "organism", "baseline", "ledger", 1)
    assert select_cell(sweep, "tiny:llama", "w8c-a16-kv:16", "ledger", 1).spec == "w8-a16-kv:16"  # canonical


def test_tasks_sharing_a_name_are_named_by_index():
    sweep = parse_sweep(RAGGED)
    config = wandb_sweep_config(sweep, "s.yaml", "s.sqlite")
    assert config["parameters"]["task"]["values"] == ["#0@1", "#0@2", "pointer_chase@3", "#2@1"]
    assert dict(select_cell(sweep, "tiny:llama", "baseline", "#2@1").task.knobs) == {"slack": 1}


def test_a_path_environment_is_selected_by_its_name_with_or_without_a_horizon_suffix():
    env = "agents/ledger.py@Ledger"
    sweep = parse_sweep(f"models: [tiny:llama]\nspecs: [baseline]\ntasks:\n  - env: {env}\n    horizons: [1, 4]\n"
                        "    seeds: 1\n")
    assert select_cell(sweep, "tiny:llama", "baseline", env, 4).horizon == 4
    assert select_cell(sweep, "tiny:llama", "baseline", f"{env}@1").horizon == 1
    grid = wandb_sweep_config(sweep, "s.yaml", "s.sqlite")["parameters"]
    for task, horizon in itertools.product(grid["task"]["values"], grid["horizon"]["values"]):
        assert select_cell(sweep, "tiny:llama", "baseline", task, horizon).task.env == env  # what a W&B agent runs
