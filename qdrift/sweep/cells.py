"""Cells: the unit a sweep runs, records and skips; one (model, spec, task, horizon) each.

A cell's `config()` is everything that determines its result (model reference, canonical spec,
kind and task, horizon, seeds, knobs, qdrift version), and its `key` is the content hash of that
configuration, so a finished cell is recognised on a rerun and any change makes a new cell.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from qdrift.store import cell_key
from qdrift.sweep.calibration import Calibration
from qdrift.sweep.file import BASELINE, AgentTask, ShortFormTask, Sweep


@dataclass(frozen=True)
class Cell:
    model: str
    spec: str  # "baseline" or a canonical spec string
    task: AgentTask | ShortFormTask
    horizon: int | None = None  # agent cells only
    version: str | None = None  # qdrift version; None means the running one
    calibration: Calibration | None = None  # set only when the spec has static scales
    dtype: str | None = None  # None: float32 (then not in the key, so earlier stores stay valid)
    # sha256 of a path environment's file, read when the cell is made (`make_cell`), so a file edited
    # during a sweep cannot change the key of a cell already running
    env_sha256: str | None = None
    # "cuda" when the models run on a GPU, whose kernels round differently from the CPU's: a store
    # filled on one must not resume cells for the other. None: the CPU (not in the key, so earlier
    # stores stay valid). Which GPU index ran it does not matter, so only the kind is kept.
    device: str | None = None
    # The sweep's batch, only for specs that round activations or the KV cache stochastically: their
    # random stream runs over the whole batch, so the batch size changes their results.
    batch: int | None = None

    def config(self) -> dict[str, Any]:
        import qdrift
        from qdrift.spec import QuantSpec

        t = self.task
        config: dict[str, Any] = {
            "model": self.model,
            "config": self.spec,
            "spec": self.spec,
            "spec_hash": None if self.spec == BASELINE else QuantSpec.parse(self.spec).hash,
            "kind": t.kind,
            "task": t.name,
            "qdrift_version": self.version or qdrift.__version__,
        }
        if self.dtype is not None:
            config["dtype"] = self.dtype
        if self.device is not None:
            config["device"] = self.device
        if self.calibration is not None:
            config["calibration"] = self.calibration.config()
        if self.batch is not None:
            config["batch"] = self.batch
        if isinstance(t, AgentTask):
            config.update(horizon=self.horizon, seeds=list(t.seeds), knobs=dict(t.knobs),
                          max_new_tokens=t.max_new_tokens)
            if t.prompt:  # only when set, so cells with the model's default prompt keep their keys
                config["prompt"] = dict(t.prompt)
            if self.env_sha256 is not None:  # a custom environment's code (built-in ones go with qdrift_version)
                config["env_sha256"] = self.env_sha256
            if t.drift and self.spec != BASELINE:  # likewise; a baseline cell has nothing to drift from
                config["drift"] = True
        else:
            config.update(runner=t.runner, limit=t.limit, options=dict(t.options))
        return config

    @property
    def key(self) -> str:
        return cell_key(self.config())

    def baseline(self) -> Cell:
        """The baseline cell this variant pairs with: the same model, task and horizon, no calibration
        (calibration is made only for specs with static scales, as `expand` does)."""
        return replace(self, spec=BASELINE, calibration=None)

    @property
    def label(self) -> str:
        """Short text for progress lines: model, spec, task and horizon."""
        h = f" L={self.horizon}" if self.horizon is not None else ""
        return f"{self.model} {self.spec} {self.task.name}{h}"


def env_source(task) -> str | None:
    """The sha256 of an agent task's path environment (None for built-in environments and short-form tasks)."""
    from qdrift.envs.registry import path_source_sha256

    return path_source_sha256(task.env) if isinstance(task, AgentTask) else None


def make_cell(sweep: Sweep, model: str, spec: str, task, horizon: int | None) -> Cell:
    """The cell of one (model, spec, task, horizon) of `sweep`, as every path makes it: the sweep's
    calibration only for specs with static scales, its dtype and device kind, a path environment's file hash."""
    from qdrift.sweep.calibration import needs_calibration

    return Cell(model, spec, task, horizon, calibration=sweep.calibration if needs_calibration(spec) else None,
                dtype=sweep.dtype, env_sha256=env_source(task), device=device_kind(sweep.device),
                batch=sweep.batch if rounds_per_batch(spec) else None)


def rounds_per_batch(spec: str) -> bool:
    """Whether `spec` rounds activations or the KV cache stochastically (`~sr`), drawing one random
    stream over each forward's whole batch (weights are rounded once, whatever the batch)."""
    if spec == BASELINE:
        return False
    from qdrift.spec import QuantSpec

    return any(s.seed is not None for s in QuantSpec.parse(spec).per_forward)


def device_kind(device: str | None) -> str | None:
    """The part of a sweep's `device:` that changes numerics: None for the CPU, "cuda" for any GPU."""
    if device is None or device == "cpu":
        return None
    return device.split(":", 1)[0]


def expand(sweep: Sweep) -> list[Cell]:
    """Every cell of the grid, grouped by model then spec (so each variant is quantized once)."""
    cells = []
    for model in sweep.models:
        for spec in sweep.specs:
            for task in sweep.tasks:
                horizons = task.horizons if isinstance(task, AgentTask) else (None,)
                cells += [make_cell(sweep, model, spec, task, h) for h in horizons]
    return cells
