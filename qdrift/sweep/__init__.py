"""Sweeps: a YAML grid of models x specs x tasks, run cell by cell into a durable results store.

    sweep = load_sweep("sweep.yaml")            # validated whole, errors name their lines
    with Store("results.sqlite") as store:
        run_sweep(sweep, store)                 # skips cells already done, records failures, goes on

`executor: ray` in the file (or `RayExecutor`, or `qdrift sweep run FILE --executor ray`) runs the
cells on Ray workers. `qdrift sweep run FILE`, `qdrift sweep status FILE` and `qdrift compare --store PATH` are the
command-line forms. `default_sweep()` is the shipped organism sweep (`default.yaml`).
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from qdrift.sweep.cells import Cell, expand
from qdrift.sweep.execute import CellResult, Executor, LocalExecutor, SweepOutcome, run_sweep, unique_cells
from qdrift.sweep.file import AgentTask, ShortFormTask, Sweep, SweepError, load_sweep, parse_sweep
from qdrift.sweep.ray_executor import RayExecutor

__all__ = ["AgentTask", "Cell", "CellResult", "Executor", "LocalExecutor", "RayExecutor", "ShortFormTask", "Sweep", "SweepError",
           "SweepOutcome", "default_sweep_path", "expand", "load_sweep", "parse_sweep", "resolve_sweep_file",
           "run_sweep", "unique_cells"]

SHIPPED = ("default",)  # sweep files that ship in this package, by name


def default_sweep_path() -> Path:
    """The shipped default sweep file (the organism on pointer chasing)."""
    return Path(str(files("qdrift.sweep") / "default.yaml"))


def resolve_sweep_file(ref: str) -> Path:
    """A sweep file by path, or a shipped one by name ('default')."""
    path = Path(ref)
    if path.is_file():
        return path
    if ref in SHIPPED:
        return Path(str(files("qdrift.sweep") / f"{ref}.yaml"))
    raise FileNotFoundError(f"sweep file '{ref}' not found; give a path to a YAML sweep file or a shipped "
                            f"sweep name ({', '.join(SHIPPED)})")
