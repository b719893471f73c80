"""Run a sweep's cells and record each one in the store as soon as it finishes.

The executor interface is one call, `submit(cells, on_start) -> iterator of CellResult`, in any
order: the in-process `LocalExecutor` runs cells one after another; `RayExecutor`
(`qdrift.sweep.ray_executor`) runs them on a Ray cluster. Only the driver (`run_sweep`) writes to
the store, one transaction per finished cell, so whichever executor runs the cells, a crash loses
at most the cells in flight.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from qdrift.store import Store
from qdrift.sweep.cells import Cell, expand
from qdrift.sweep.file import Sweep


@dataclass
class CellResult:
    cell: Cell
    rows: dict[str, list[dict]] | None  # None when the cell failed
    error: str | None
    started: float
    finished: float


class Executor(Protocol):
    def submit(self, cells: Sequence[Cell], on_start: Callable[[Cell], bool | None] | None = None) -> Iterator[CellResult]:
        """Run `cells`; yield each one's result as it finishes. `on_start` is asked just before a cell
        begins; a cell it answers False for is skipped (another run sharing the store has it)."""
        ...


def run_cell(runner: Callable[[Cell], dict[str, list[dict]]], cell: Cell) -> CellResult:
    """Run one cell; an exception becomes a failed result carrying its traceback (the sweep goes on)."""
    started = time.time()
    try:
        rows, error = runner(cell), None
    except Exception as e:
        rows, error = None, f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"
    return CellResult(cell, rows, error, started, time.time())


class LocalExecutor:
    """Cells one by one in this process, through `runner` (cell -> {row kind: rows})."""

    def __init__(self, runner: Callable[[Cell], dict[str, list[dict]]], threads: int | None = None):
        self.runner = runner
        self.threads = threads

    def submit(self, cells: Sequence[Cell], on_start: Callable[[Cell], bool | None] | None = None) -> Iterator[CellResult]:
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        for cell in cells:
            if on_start is not None and on_start(cell) is False:
                continue
            yield run_cell(self.runner, cell)


@dataclass
class SweepOutcome:
    total: int
    skipped: int  # already done in the store
    done: int = 0
    failed: list[tuple[str, str]] = field(default_factory=list)  # (cell label, first line of the error)
    sink_error: str | None = None  # the result sink (e.g. W&B) failed and was not called again
    interrupted: int = 0  # pending cells an earlier run started and never recorded: run last
    elsewhere: int = 0  # pending cells another run sharing the store finished meanwhile
    unlogged: int = 0  # cells the result sink did not take (it failed): the next run with the same sink logs them
    caught_up: int = 0  # done cells an earlier run's failed sink had missed, logged by this run

    def summary(self) -> str:
        by_others = f", {self.elsewhere} finished by another run sharing the store" if self.elsewhere else ""
        text = (f"{self.total} cells: {self.skipped} already done, {self.done} run now{by_others}, "
                f"{len(self.failed)} failed")
        lines = [text, *(f"  failed: {label}: {err}" for label, err in self.failed)]
        if self.interrupted:
            lines.append(f"  {self.interrupted} cell(s) had been started by a run that never recorded them (killed, or "
                         "crashed in the cell): they ran after the others")
        if self.caught_up:
            lines.append(f"  {self.caught_up} done cell(s) an earlier run's result sink had missed were logged now")
        if self.sink_error:
            lines.append(f"  the result sink failed and was stopped (every cell is in the store): {self.sink_error}")
            if self.unlogged:
                lines.append(f"  {self.unlogged} cell(s) not logged: the next run with the same sink logs them "
                             "from the store")
        return "\n".join(lines)


def unique_cells(sweep: Sweep) -> list[Cell]:
    """The sweep's cells, each distinct configuration once (two tasks may expand to the same cell)."""
    seen, out = set(), []
    for cell in expand(sweep):
        if cell.key not in seen:
            seen.add(cell.key)
            out.append(cell)
    return out


def executor_for(sweep: Sweep, address: str | None = None) -> Executor:
    """The executor the sweep names (`executor:`, `workers:`, `threads:`); `address` is a Ray cluster's."""
    from qdrift.sweep.runners import CellRunner

    if sweep.executor == "ray":
        from qdrift.sweep.ray_executor import RayExecutor

        return RayExecutor(partial(CellRunner, batch=sweep.batch, dtype=sweep.dtype, device=sweep.device), workers=sweep.workers,
                           threads=sweep.threads or 1, address=address)
    if address is not None:
        raise ValueError(f"a Ray address ({address!r}) needs the ray executor; this sweep's executor is "
                         f"{sweep.executor!r}")
    return LocalExecutor(CellRunner(batch=sweep.batch, dtype=sweep.dtype, device=sweep.device),
                         threads=sweep.threads)


def run_sweep(sweep: Sweep, store: Store, executor: Executor | None = None, progress: bool = True,
              on_result: Callable[[CellResult], None] | None = None, poll_s: float = 5.0) -> SweepOutcome:
    """Run every cell of `sweep` not already done in `store` (failed ones are retried).

    Each model's weight files are fingerprinted first and checked against the store's record
    (`Store.check_model`), so retrained weights under the same name raise instead of resuming.

    Runs may share a store: each claims a cell just before running it (`Store.claim`) and skips the
    cells another live run is running, then waits for those (checking every `poll_s` seconds) and
    runs any whose run died before recording them. Two runs of one grid split its cells between them.

    `on_result` (e.g. a W&B sink) sees each result after it is committed to the store, so a sink
    that fails never costs a measured cell; after its first failure it is not called again, and the
    outcome's summary says so. A sink with a `name` (WandbSink: its project) has the cells it missed
    noted in the store, and the next run with that sink logs them first, from the stored rows.
    """
    from qdrift.models.fingerprint import model_fingerprint

    for ref in sweep.models:  # before any cell runs: never resume into results of other weights
        store.check_model(ref, model_fingerprint(ref))
    if executor is None:
        executor = executor_for(sweep)
    cells = unique_cells(sweep)
    with store.running():
        began = time.time()
        pending = [c for c in cells if store.status(c.key) != "done"]
        # A cell an earlier run started and never recorded may be one that kills its process (a crash,
        # an out-of-memory kill): it runs after the others, so it cannot keep them from ever running.
        interrupted = store.interrupted()
        pending.sort(key=lambda c: c.key in interrupted)
        outcome = SweepOutcome(len(cells), len(cells) - len(pending),
                               interrupted=sum(c.key in interrupted for c in pending))
        bar = _bar(sweep.name, len(cells), outcome.skipped, progress)
        sink = _Sink(on_result, store, outcome, bar)
        try:
            sink.catch_up(cells)
            held = _run_claimed(pending, store, executor, outcome, bar, sink, began)
            told = False
            while held:  # cells other live runs are running: wait for them, take over any whose run died
                if not told:
                    pids = ", ".join(map(str, store.holders(c.key for c in held)))
                    bar.write(f"waiting for {len(held)} cell(s) that another run sharing the store is running "
                              f"(pid {pids}); a cell whose run dies unrecorded is run here")
                    told = True
                time.sleep(poll_s)
                ready = [c for c in held if store.peek(c.key, began) != "held"]
                if ready:  # recorded meanwhile, or their run died: account for them (or run them) now
                    held = [c for c in held if c not in ready]
                    held += _run_claimed(ready, store, executor, outcome, bar, sink, began)
            sink.count_unlogged(cells)
        finally:
            bar.close()
    return outcome


def _run_claimed(cells: list[Cell], store: Store, executor: Executor, outcome: SweepOutcome, bar,
                 sink: _Sink, began: float) -> list[Cell]:
    """Run those of `cells` this run can claim, record each result; return the ones other runs hold."""
    held: list[Cell] = []

    def on_start(cell: Cell) -> bool:
        state = store.claim(cell.key, since=began)
        if state == "ours":
            bar.set_postfix_str(cell.label)
            return True
        if state == "held":
            held.append(cell)
            return False
        # Another run sharing the store recorded it while this one ran: done, or failed (not tried twice).
        if state == "done":
            outcome.elsewhere += 1
        else:
            error = ((store.error(cell.key) or "").splitlines() or [""])[0]
            outcome.failed.append((cell.label, f"(in another run sharing the store) {error}"))
        bar.update(1)
        return False

    for result in executor.submit(cells, on_start=on_start):
        cell = result.cell
        if result.error is None:
            store.record_done(cell.key, cell.config(), result.rows, result.started, result.finished)
            outcome.done += 1
        elif store.record_failed(cell.key, cell.config(), result.error, result.started, result.finished):
            outcome.failed.append((cell.label, result.error.splitlines()[0]))
            bar.write(f"failed: {cell.label}: {result.error.splitlines()[0]}")
        else:  # another run sharing the store finished this cell meanwhile: its results stand
            outcome.done += 1
            bar.write(f"kept: {cell.label} was finished by another run sharing the store; this attempt "
                      f"failed ({result.error.splitlines()[0]})")
        sink(result)
        bar.update(1)
    return held


class _Sink:
    """`on_result` as the sweep calls it: after its first failure never again (said, not hidden), and,
    when it has a `name`, the cells it did not take noted in the store for the next run to log."""

    def __init__(self, on_result: Callable[[CellResult], None] | None, store: Store, outcome: SweepOutcome, bar):
        self.on_result, self.store, self.outcome, self.bar = on_result, store, outcome, bar
        self.name = getattr(on_result, "name", None)
        self.skipped = 0  # results it was not given, or failed on

    def __call__(self, result: CellResult) -> bool:
        """Give the sink `result`; whether it took it."""
        if self.on_result is None:
            return False
        key = result.cell.key
        if self.outcome.sink_error is None:
            try:
                self.on_result(result)
            except Exception as e:  # noqa: BLE001 - a sink must not stop the sweep; said, not hidden
                self.outcome.sink_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                self.bar.write(f"the result sink failed on {result.cell.label} ({self.outcome.sink_error}); the "
                               "sweep goes on without it, and every cell is still stored")
            else:
                if self.name:
                    self.store.mark_logged(key, self.name)
                return True
        self.skipped += 1
        if self.name:
            self.store.mark_unlogged(key, self.name)
        return False

    def catch_up(self, cells: list[Cell]) -> None:
        """Log the done cells of `cells` an earlier run's failed sink of the same name missed (failed and
        pending ones run now and are logged then)."""
        missed = self.store.unlogged(self.name) if self.name else set()
        for cell in cells:
            rec = self.store.cell(cell.key) if cell.key in missed else None
            if rec is None or rec["status"] != "done":
                continue
            if self.outcome.sink_error or not self(CellResult(cell, self.store.cell_rows(cell.key), None,
                                                              rec["started"], rec["finished"])):
                return
            self.outcome.caught_up += 1

    def count_unlogged(self, cells: list[Cell]) -> None:
        """The outcome's count of `cells` the sink has not taken, as the run ends."""
        if self.name:
            self.outcome.unlogged = len(self.store.unlogged(self.name) & {c.key for c in cells})
        else:
            self.outcome.unlogged = self.skipped


class _Lines:
    """A plain-text stand-in for tqdm: one line per finished cell."""

    def __init__(self, name: str, total: int, initial: int, enabled: bool):
        self.name, self.total, self.n, self.enabled, self.t0 = name, total, initial, enabled, time.time()
        self.current = ""

    def set_postfix_str(self, text: str) -> None:
        self.current = text

    def update(self, k: int) -> None:
        self.n += k
        if self.enabled:
            print(f"{self.name}: {self.n}/{self.total} cells ({time.time() - self.t0:.0f} s) {self.current}",
                  file=sys.stderr, flush=True)

    def write(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        pass


def _bar(name: str, total: int, initial: int, enabled: bool):
    """tqdm (a transformers dependency) when present: cells done / total, ETA, the current cell."""
    try:
        from tqdm import tqdm
    except ImportError:
        return _Lines(name, total, initial, enabled)
    return tqdm(total=total, initial=initial, desc=name, unit="cell", disable=not enabled, file=sys.stderr)
