"""A W&B sweep configuration for a sweep file, and the one cell a `wandb agent` run names.

`wandb_sweep_config(sweep, file, store)` gives a grid over the sweep file's axes (model, spec,
task, horizon) whose command runs one cell per agent run:

    /usr/bin/env python -m qdrift.cli sweep cell FILE --store STORE --model=M --spec=S --task=T --horizon=H

(`${env} ${interpreter} -m qdrift.cli ... ${args}`, the agent's own macros). Every agent run
commits its cell to the same store, so a killed run loses only its cell and a cell already done
is not run again. When the grid is not rectangular (tasks with different horizons, or short-form
tasks beside agent ones), `task` carries the horizon as `NAME@H` and there is no `horizon` axis,
so the grid holds exactly the sweep's cells. Tasks are named by `task` name, or `#INDEX` when
two tasks of the file share a name.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from qdrift.sweep.cells import Cell, make_cell
from qdrift.sweep.file import BASELINE, AgentTask, Sweep

COMMAND_PREFIX = ["${env}", "${interpreter}", "-m", "qdrift.cli", "sweep", "cell"]


def task_refs(sweep: Sweep) -> list[str]:
    """How each task is named on the command line: its name, or '#i' when names repeat."""
    names = [t.name for t in sweep.tasks]
    return [n if names.count(n) == 1 else f"#{i}" for i, n in enumerate(names)]


def is_rectangular(sweep: Sweep) -> bool:
    """Whether model x spec x task x horizon is exactly the sweep's grid (all agent tasks, same horizons)."""
    horizons = {t.horizons if isinstance(t, AgentTask) else None for t in sweep.tasks}
    return len(horizons) == 1 and None not in horizons


def wandb_sweep_config(sweep: Sweep, sweep_file: str | Path, store: str | Path) -> dict[str, Any]:
    """The W&B sweep configuration (method grid) whose agent runs are this sweep's cells."""
    refs = task_refs(sweep)
    parameters: dict[str, Any] = {"model": {"values": list(sweep.models)}, "spec": {"values": list(sweep.specs)}}
    if is_rectangular(sweep):
        parameters["task"] = {"values": refs}
        parameters["horizon"] = {"values": list(sweep.tasks[0].horizons)}
    else:
        values = []
        for ref, task in zip(refs, sweep.tasks, strict=True):
            values += [f"{ref}@{h}" for h in task.horizons] if isinstance(task, AgentTask) else [ref]
        parameters["task"] = {"values": values}
    config: dict[str, Any] = {
        "name": sweep.name,
        "description": sweep.description or f"qdrift sweep {sweep.name}: one cell per run",
        "method": "grid",
        "command": [*COMMAND_PREFIX, str(Path(sweep_file).resolve()), "--store", str(Path(store).resolve()),
                    "${args}"],
        "parameters": parameters,
    }
    if sweep.wandb is not None:
        config.update({k: v for k, v in (("project", sweep.wandb.project), ("entity", sweep.wandb.entity)) if v})
    return config


def _pick(kind: str, value, choices, source: str):
    if value not in choices:
        raise ValueError(f"{kind} {value!r} is not in sweep file {source}; valid {kind}s: "
                         f"{', '.join(str(c) for c in choices)}")
    return value


def select_cell(sweep: Sweep, model: str, spec: str, task: str, horizon: int | None = None) -> Cell:
    """The sweep's cell for one (model, spec, task, horizon), or a ValueError naming what is not in the file."""
    from qdrift.spec import QuantSpec

    _pick("model", model, sweep.models, sweep.source)
    if spec != BASELINE:
        try:
            spec = str(QuantSpec.parse(spec))
        except ValueError as e:
            raise ValueError(f"spec {spec!r} does not parse: {e}") from None
    _pick("spec", spec, sweep.specs, sweep.source)
    refs = task_refs(sweep)
    if "@" in task and task not in refs:  # `env@H`; a path environment (`envs/x.py@Class`) has an @ of its own
        task, at = task.rsplit("@", 1)
        if horizon is not None:
            raise ValueError(f"task '{task}@{at}' already names a horizon; drop --horizon {horizon}")
        if not at.isdigit():
            raise ValueError(f"task '{task}@{at}': the part after '@' must be a horizon (an integer)")
        horizon = int(at)
    chosen = sweep.tasks[refs.index(_pick("task", task, refs, sweep.source))]
    if isinstance(chosen, AgentTask):
        if horizon is None:
            raise ValueError(f"task {task!r} is an agent task: give --horizon, one of "
                             f"{', '.join(map(str, chosen.horizons))}")
        _pick("horizon", horizon, chosen.horizons, f"{sweep.source} (task {task!r})")
    elif horizon is not None:
        raise ValueError(f"task {task!r} is a short-form task and has no horizon; drop --horizon {horizon}")
    return make_cell(sweep, model, spec, chosen, horizon)


def single_cell_sweep(sweep: Sweep, cell: Cell) -> Sweep:
    """`sweep` cut down to `cell` alone (same cell key: the key does not depend on the other cells)."""
    task = replace(cell.task, horizons=(cell.horizon,)) if isinstance(cell.task, AgentTask) else cell.task
    return replace(sweep, models=(cell.model,), specs=(cell.spec,), tasks=(task,))
