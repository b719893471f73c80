"""Cells: the unit a sweep runs, records and skips; one (model, spec, task, horizon) each.

A cell's `config()` is everything that determines its result (model reference, canonical spec,
kind and task, horizon, seeds, knobs, qdrift version), and its `key` is the content hash of that
configuration, so a finished cell is recognised on a rerun and any change makes a new cell.
"""

from __future__ import annotations

import glob
import hashlib
import os
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

from qdrift.repo_paths import DATA_ENV
from qdrift.store import cell_key
from qdrift.sweep.calibration import Calibration
from qdrift.sweep.file import BASELINE, BATCH, AgentTask, ShortFormTask, Sweep


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
    # sha256 over a short-form task's data files outside the checkout (the shared data, $QDRIFT_SHARED_DATA),
    # read when the cell is made (`data_source`): files in the checkout are in the code fingerprint already.
    data_sha256: str | None = None

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
            if t.sampling:  # only when set: greedy cells keep their keys
                config["sampling"] = dict(t.sampling)
        else:
            config.update(runner=t.runner, limit=t.limit, options=dict(t.options))
            if self.data_sha256 is not None:  # only when read from outside the checkout, so other cells keep their keys
                config["data_sha256"] = self.data_sha256
        return config

    @property
    def key(self) -> str:
        return cell_key(self.config())

    def baseline(self) -> Cell:
        """The baseline cell this variant pairs with, as `make_cell` makes it: the same model, task and
        horizon, with neither calibration (only specs with static scales have one) nor batch (only `~sr`
        specs are keyed by it)."""
        return replace(self, spec=BASELINE, **spec_fields(BASELINE, self.task, self.calibration, self.batch))

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
    return Cell(model, spec, task, horizon, dtype=None if sweep.dtype == "float32" else sweep.dtype,
                env_sha256=env_source(task), device=device_kind(sweep.device), data_sha256=data_source(task),
                **spec_fields(spec, task, sweep.calibration, sweep.batch))


def spec_fields(spec: str, task, calibration: Calibration | None, batch: int | None) -> dict[str, Any]:
    """The cell fields that depend on the spec, for `make_cell` and `Cell.baseline` alike: the sweep's
    calibration only for specs with static scales, its batch only for `~sr` specs."""
    from qdrift.sweep.calibration import needs_calibration

    return {"calibration": calibration.with_source() if calibration and needs_calibration(spec) else None,
            "batch": batch_key(batch, task) if rounds_per_batch(spec) else None}


def batch_key(batch: int, task) -> int:
    """The batch a `~sr` cell is keyed by: what its random stream runs over is the chunk of seeds an agent
    task runs at once, `min(batch, seeds)`, so every batch giving the default's chunk keys as the default
    (cells of sweeps that left `batch` out keep their keys) and any other as its chunk."""
    if not isinstance(task, AgentTask):
        return batch
    chunk = min(batch, len(task.seeds))
    return BATCH if chunk == min(BATCH, len(task.seeds)) else chunk


@cache
def _file_sha256(path: str, mtime_ns: int, size: int) -> str:
    """`file_sha256`, once per version of a file in a process (keyed by its mtime and size)."""
    from qdrift.verify.requests import file_sha256

    return file_sha256(path)


@cache
def _outside_data_files(task_name: str, data_dir: str | None) -> tuple[tuple[str, Path], ...]:
    """(split, path) of `task_name`'s data files outside the checkout, resolved as the runner resolves
    the task: once per task and data folder in a process, not per cell."""
    from qdrift.lmeval.tasks import resolve_tasks
    from qdrift.repo_paths import REPO

    specs, _ = resolve_tasks([task_name])  # as the runner resolves the name (gsm8k_local, mmlu_local_<subject>, ...)
    files: list[tuple[str, str]] = []  # (split, pattern) of every task config with local data
    for spec in specs:
        data_files = spec.get("dataset_kwargs", {}).get("data_files") if isinstance(spec, dict) else None
        for split, value in sorted((data_files or {}).items()):
            files += [(split, p) for p in (value if isinstance(value, list) else [value])]
    out = []
    for split, pattern in files:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched or not all(Path(m).is_file() for m in matched):
            raise FileNotFoundError(f"short-form task {task_name!r}: no data file at {pattern} (split {split!r}); "
                                    f"set ${DATA_ENV} to the folder holding the shared benchmark data")
        out += [(split, path) for path in (Path(m).resolve() for m in matched) if not path.is_relative_to(REPO)]
    return tuple(out)


def data_source(task) -> str | None:
    """sha256 over the bytes of an lm-eval short-form task's data files that lie outside the checkout (the
    shared data, found at run time under $QDRIFT_SHARED_DATA), or None where it has none there.

    The cell key must change with the items a cell is measured on: other data under the same task name
    would otherwise resume as "already done", and variants would pair with a baseline of other items.
    Files inside the checkout (evals/) are covered by the code fingerprint, so those cells keep their keys."""
    if not isinstance(task, ShortFormTask) or task.runner != "lmeval":
        return None
    files = _outside_data_files(task.task, os.environ.get(DATA_ENV))
    if not files:
        return None
    h = hashlib.sha256()
    for split, path in files:
        st = path.stat()
        h.update(f"{split}\0{path.name}\0{_file_sha256(str(path), st.st_mtime_ns, st.st_size)}\n".encode())
    return h.hexdigest()


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
