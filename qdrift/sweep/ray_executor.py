"""Run a sweep's cells on a Ray cluster; the driver still commits every result to the store itself.

    executor = RayExecutor(partial(CellRunner, batch=50), workers=4)            # a local cluster
    executor = RayExecutor(partial(CellRunner, batch=50), address="auto")       # the running cluster
    run_sweep(sweep, store, executor=executor)

Cells run on `workers` Ray actors, one cell each at a time. Actors rather than plain tasks because
each holds a `CellRunner`, and so its model cache: a base model loads once per worker and each
quantized variant is built once per worker, where a task per cell would reload and requantize the
model for every cell. A free worker takes the next cell of the (model, spec) it already holds when
one is left. Results come back with `ray.wait` as they finish and go to the driver (`run_sweep`),
the only writer of the store, so durability is the local executor's: one transaction per finished
cell, and a crash of the driver loses only the cells in flight.

A cell that raises is a failed result with its traceback, as locally. A worker that dies (killed,
out of memory, a crash in native code) fails the cell it was running with the reason and is replaced
by a fresh one; the sweep goes on and a rerun retries the cell.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence

from qdrift.sweep.cells import Cell
from qdrift.sweep.execute import CellResult, run_cell

RunnerFactory = Callable[[], Callable[[Cell], dict[str, list[dict]]]]


def import_ray():
    """The `ray` module, or an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError('the ray executor needs Ray, which is not installed: pip install "qdrift[ray]" '
                          "(or run the sweep with the local executor)") from e
    return ray


class CellWorker:
    """One Ray actor: a cell runner (and its model cache) kept for every cell this worker runs."""

    def __init__(self, make_runner: RunnerFactory, threads: int):
        # The worker's share of the machine, set explicitly rather than left to torch's guess: through
        # the environment for a torch imported later (as the cell runner does), directly for one
        # already imported. Importing torch here would cost a runner that never uses it seconds.
        self.threads = threads
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(threads)
        self.runner = make_runner()

    def run(self, cell: Cell) -> CellResult:
        torch = sys.modules.get("torch")
        if torch is not None and torch.get_num_threads() != self.threads:
            torch.set_num_threads(self.threads)
        return run_cell(self.runner, cell)


class RayExecutor:
    """Cells as calls on `workers` Ray actors of `threads` CPUs each.

    `address` None starts a local cluster of `workers * threads` CPUs (or uses the one this process
    already started with `ray.init`); 'auto' or 'ray://host:port' joins a running cluster, whose
    nodes need the same qdrift installed. `workers` None means as many as the cluster's CPUs allow.
    """

    def __init__(self, make_runner: RunnerFactory, workers: int | None = None, threads: int = 1,
                 address: str | None = None, temp_dir: str | None = None):
        if workers is not None and (not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers must be an integer >= 1 (or None: as many as the CPUs allow), got {workers!r}")
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        import_ray()  # fail at construction, before any cell is scheduled
        self.make_runner, self.workers, self.threads = make_runner, workers, threads
        self.address, self.temp_dir = address, temp_dir

    def submit(self, cells: Sequence[Cell], on_start: Callable[[Cell], bool | None] | None = None) -> Iterator[CellResult]:
        ray = import_ray()
        if not cells:
            return
        started_here = self._connect(ray)
        actors: list = []
        try:
            n = min(self._worker_count(ray), len(cells))
            actors = [self._new_actor(ray) for _ in range(n)]
            holds: list[tuple[str, str] | None] = [None] * n  # the (model, spec) each worker last ran
            pending, idle = list(cells), list(range(n))
            in_flight: dict = {}  # object ref -> (worker slot, cell, time sent)
            while pending or in_flight:
                while idle and pending:
                    cell = pending.pop(_next_for(pending, holds[idle[0]]))
                    if on_start is not None and on_start(cell) is False:
                        continue  # another run sharing the store has it
                    slot = idle.pop(0)
                    holds[slot] = (cell.model, cell.spec)
                    in_flight[actors[slot].run.remote(cell)] = (slot, cell, time.time())
                if not in_flight:
                    break
                (ref,), _ = ray.wait(list(in_flight), num_returns=1)
                slot, cell, sent = in_flight.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as e:  # the worker died or the call could not run
                    result = CellResult(cell, None, _lost_worker_error(e), sent, time.time())
                    ray.kill(actors[slot], no_restart=True)
                    actors[slot], holds[slot] = self._new_actor(ray), None
                idle.append(slot)
                yield result
        finally:
            for actor in actors:
                ray.kill(actor, no_restart=True)
            if started_here:
                ray.shutdown()
                if self.temp_dir is None:  # the temp dir made for it; one the caller named stays
                    shutil.rmtree(started_here, ignore_errors=True)

    def _connect(self, ray) -> str | None:
        """Join or start the cluster; the temp dir of a local cluster started here (to shut down), else None."""
        if ray.is_initialized():
            return None
        quiet = {"include_dashboard": False, "logging_level": logging.ERROR, "log_to_driver": False}
        if self.address is not None:
            ray.init(address=self.address, **quiet)
            return None
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a sweep reports nothing anywhere
        # A temp dir of its own: Ray's default /tmp/ray is shared by every local cluster on the machine.
        temp = self.temp_dir or tempfile.mkdtemp(prefix="qdrift-ray-")
        try:
            ray.init(num_cpus=(self.workers or os.cpu_count() or 1) * self.threads, _temp_dir=temp, **quiet)
        except BaseException:
            if self.temp_dir is None:
                shutil.rmtree(temp, ignore_errors=True)
            raise
        return temp

    def _worker_count(self, ray) -> int:
        """`workers`, or as many as the cluster's CPUs hold; never more than they hold (the rest would wait forever)."""
        cpus = int(ray.cluster_resources().get("CPU", 0))
        fits = cpus // self.threads
        if fits < 1:
            raise RuntimeError(f"the Ray cluster has {cpus} CPU(s); a worker needs threads={self.threads}")
        if self.workers is not None and self.workers > fits:
            print(f"qdrift: the Ray cluster's {cpus} CPU(s) hold {fits} worker(s) of {self.threads} thread(s); "
                  f"running {fits}, not {self.workers}", file=sys.stderr, flush=True)
        return min(self.workers or fits, fits)

    def _new_actor(self, ray):
        # No restarts and no retries: a cell runs once per sweep run; a lost one is recorded as failed.
        worker = ray.remote(CellWorker).options(num_cpus=self.threads, max_restarts=0, max_task_retries=0)
        return worker.remote(self.make_runner, self.threads)


def _next_for(pending: list[Cell], holds: tuple[str, str] | None) -> int:
    """Index of the next cell for a worker holding `holds`: the same (model, spec) if one is left."""
    for i, cell in enumerate(pending):
        if (cell.model, cell.spec) == holds:
            return i
    return 0


def _lost_worker_error(e: Exception) -> str:
    return (f"WorkerLost: the Ray worker running this cell failed ({type(e).__name__}); a rerun retries "
            f"the cell\n\n{e}")
