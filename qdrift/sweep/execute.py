"""Run a sweep's cells and record each one in the store as soon as it finishes.

The executor interface is one call, `submit(cells, on_start) -> iterator of CellResult`, in any
order: the in-process `LocalExecutor` runs cells one after another; `RayExecutor`
(`qdrift.sweep.ray_executor`) runs them on a Ray cluster. Only the driver (`run_sweep`) writes to
the store, one transaction per finished cell, so whichever executor runs the cells, a crash loses
at most the cells in flight.
"""

from __future__ import annotations

import math
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Protocol

from qdrift.code_fingerprint import code_fingerprint, running_code
from qdrift.store import CodeChanged, Store, WeightsChanged
from qdrift.sweep.cells import Cell, expand
from qdrift.sweep.file import Sweep

# The code this process measures with is read when the sweep machinery is imported, before the modules
# a cell imports later (models, quantization, environments): an edit made after this point, before the
# first sweep too, makes the cells fail rather than record results of mixed code (run_cell).
running_code()


@dataclass
class CellResult:
    cell: Cell
    rows: dict[str, list[dict]] | None  # None when the cell failed
    error: str | None
    started: float
    finished: float
    code: str | None = None  # the fingerprint of the code that ran it (qdrift.code_fingerprint.running_code)


class Executor(Protocol):
    def submit(self, cells: Sequence[Cell], on_start: Callable[[Cell], bool | None] | None = None) -> Iterator[CellResult]:
        """Run `cells`; yield each one's result as it finishes. `on_start` is asked just before a cell
        begins; a cell it answers False for is skipped (another run sharing the store has it)."""
        ...


def stored_result(store: Store, cell: Cell) -> CellResult:
    """A done cell's result as its run returned it, read back from the store (for a result sink)."""
    rec = store.cell(cell.key)
    return CellResult(cell, store.cell_rows(cell.key), None, rec["started"], rec["finished"], rec["code"])


def run_cell(runner: Callable[[Cell], dict[str, list[dict]]], cell: Cell) -> CellResult:
    """Run one cell; an exception becomes a failed result carrying its traceback (the sweep goes on).

    The result carries the code this process first read (`running_code`: a Ray worker's may differ from
    the driver's). A cell is not run once qdrift's files differ from that reading, and fails if they
    came to differ while it ran: modules it imported meanwhile may be either code's."""
    code = running_code()
    started = time.time()
    changed = _code_changed(code)
    if changed:
        return CellResult(cell, None, changed, started, time.time(), code)
    try:
        rows, error = runner(cell), None
    except Exception as e:
        rows, error = None, f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"
    changed = _code_changed(code)
    if changed and error is None:
        rows, error = None, changed
    return CellResult(cell, rows, error, started, time.time(), code)


def _code_changed(code: str) -> str | None:
    """The error of a process whose code files no longer match its first reading (`code`), or None."""
    now = code_fingerprint()
    if now == code:
        return None
    return (f"CodeChanged: qdrift's files (its sources, built-in environments or task files) changed since this "
            f"process first read them (when it imported qdrift.sweep): sha256 {code[:16]}... then, {now[:16]}... "
            "now; run the sweep again in a new process (a notebook: restart its kernel)")


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
    unlogged: int = 0  # cells the result sink did not take (it failed)
    caught_up: int = 0  # done cells an earlier run's failed sink had missed, logged by this run
    logs_resume: bool = False  # the sink has a name: the store keeps what it missed for the next run

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
                then = ("the next run with the same sink logs them from the store" if self.logs_resume else
                        "this sink keeps no record of them")
                lines.append(f"  {self.unlogged} cell(s) not logged: {then}")
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
              on_result: Callable[[CellResult], None] | None = None, poll_s: float = 5.0,
              allow_code_change: bool = False) -> SweepOutcome:
    """Run every cell of `sweep` not already done in `store` (failed ones are retried).

    Each model's weight files are fingerprinted first and checked against the store's record
    (`Store.check_model`), so retrained weights under the same name raise instead of resuming. So is
    qdrift's own code (`Store.check_code`): a store holding results of other code raises, unless
    `allow_code_change` (for a change that cannot alter results); each cell records the code that ran it.

    Runs may share a store: each claims a cell just before running it (`Store.claim`) and skips the
    cells another live run is running, then waits for those (checking every `poll_s` seconds) and
    runs any whose run died before recording them. Two runs of one grid split its cells between them.
    With the local executor, an agent cell also keeps each finished chunk of seeds in the store, so a
    rerun after a kill resumes a long cell after its last finished chunk (qdrift.sweep.runners).

    `on_result` (e.g. a W&B sink) sees each result after it is committed to the store, so a sink
    that fails never costs a measured cell; after its first failure it is not called again, and the
    outcome's summary says so. A sink with a `name` (WandbSink: its project) has the cells it missed
    noted in the store, and the next run with that sink logs them first, from the stored rows.
    """
    from qdrift.models.fingerprint import model_fingerprint

    store.require_writable()  # before hashing any model: a read-only store takes no result
    store.check_integrity()  # a damaged store can report cells done that it no longer holds
    store.check_code(running_code(), allow_code_change)
    weights = {ref: model_fingerprint(ref) for ref in sweep.models}
    for ref, fingerprint in weights.items():  # before any cell runs: never resume into results of other weights
        store.check_model(ref, fingerprint)
    if executor is None:
        executor = executor_for(sweep)
    runner = getattr(executor, "runner", None)
    if hasattr(runner, "chunk_store"):  # in this process: agent cells keep finished chunks in the store
        runner.chunk_store = (store, running_code())
    cells = unique_cells(sweep)
    with store.running():
        seen = store.attempts()  # a cell recorded failed more often later was tried by another run meanwhile
        pending = [c for c in cells if store.status(c.key) != "done"]
        # A cell an earlier run started and never recorded may be one that kills its process (a crash,
        # an out-of-memory kill): it runs after the others, so it cannot keep them from ever running.
        interrupted = store.interrupted()
        pending.sort(key=lambda c: c.key in interrupted)
        outcome = SweepOutcome(len(cells), len(cells) - len(pending),
                               interrupted=sum(c.key in interrupted for c in pending))
        bar = _bar(sweep.name, len(cells), outcome.skipped, progress)
        run = _Run(store, executor, outcome, bar, _Sink(on_result, store, outcome, bar), seen, weights,
                   allow_code_change)
        try:
            run.sink.catch_up(cells)
            held = run.cells(pending)
            waited, told = time.monotonic(), -math.inf
            while held:  # cells other live runs are running: wait for them, take over any whose run died
                if time.monotonic() - told > 300:  # said at once, then every 5 minutes
                    pids = store.holders(c.key for c in held)
                    if pids:
                        bar.write(f"waiting for {len(held)} cell(s) that another run sharing the store is running "
                                  f"(pid {', '.join(map(str, pids))}; {time.monotonic() - waited:.0f} s so far); a "
                                  "cell whose run dies unrecorded is run here. Ctrl-C stops this run; nothing "
                                  "stored is lost")
                        told = time.monotonic()
                time.sleep(poll_s)
                held = run.cells(held)
            outcome.unlogged = run.sink.unlogged(cells)
        finally:
            bar.close()
    return outcome


@dataclass
class _Run:
    """One run's pass over cells: claim each just before it runs, record it, give it to the sink."""

    store: Store
    executor: Executor
    outcome: SweepOutcome
    bar: Any
    sink: _Sink
    seen: dict[str, int]  # attempts recorded per cell when the run began
    weights: dict[str, str]  # model reference -> the weights sha256 this run checked (Store.check_model)
    allow_code_change: bool  # record cells whose code differs from other done cells' (run_sweep)

    def cells(self, cells: list[Cell]) -> list[Cell]:
        """Run those of `cells` this run can claim; return the ones other live runs hold. Cells that are
        held or settled are sorted out first, so an executor is started only for cells to run."""
        held: list[Cell] = []
        free = [c for c in cells if not self._settled(c, self.store.peek(c.key, self.seen.get(c.key, 0)), held)]
        if not free:
            return held

        def on_start(cell: Cell) -> bool:
            state = self.store.claim(cell.key, self.seen.get(cell.key, 0))
            if state == "ours":
                self.bar.set_postfix_str(cell.label)
                return True
            self._settled(cell, state, held)
            return False

        for result in self.executor.submit(free, on_start=on_start):
            self._record(result)
            self.bar.update(1)
        return held

    def _settled(self, cell: Cell, state: str, held: list[Cell]) -> bool:
        """Account for a cell this run will not run now (`state` from `Store.peek`); False if it is free."""
        if state == "free":
            return False
        if state == "held":
            held.append(cell)
            return True
        if state == "done":  # another run sharing the store recorded it while this one ran
            self.outcome.elsewhere += 1
        else:  # failed there: not tried twice in a row (a rerun retries it)
            error = ((self.store.cell(cell.key)["error"] or "").splitlines() or [""])[0]
            self.outcome.failed.append((cell.label, f"(in another run sharing the store) {error}"))
        self.bar.update(1)
        return True

    def _record(self, result: CellResult) -> None:
        cell, name = result.cell, self.sink.name
        if result.error is None:
            try:
                self.store.record_done(cell.key, cell.config(), result.rows, result.started, result.finished,
                                       sink=name, code=result.code, allow_other_code=self.allow_code_change,
                                       weights=(cell.model, self.weights[cell.model]))
            except (CodeChanged, WeightsChanged) as e:  # another run's results, since this one checked the store
                result = replace(result, rows=None, error=f"{type(e).__name__}: {e}")
            else:
                self.outcome.done += 1
                self.sink(result)
                return
        if self.store.record_failed(cell.key, cell.config(), result.error, result.started, result.finished,
                                    sink=name):
            self.outcome.failed.append((cell.label, result.error.splitlines()[0]))
            self.bar.write(f"failed: {cell.label}: {result.error.splitlines()[0]}")
        else:  # another run sharing the store finished this cell meanwhile: its results stand
            self.outcome.elsewhere += 1
            self.bar.write(f"kept: {cell.label} was finished by another run sharing the store; this attempt "
                           f"failed ({result.error.splitlines()[0]})")
            return  # that run's result, that run's log
        self.sink(result)


class _Sink:
    """`on_result` as the sweep calls it: after its first failure never again (said, not hidden). A
    sink with a `name` has each cell's log noted as pending in the store with the cell's record and
    cleared once logged, so what it missed (it failed, or the run was killed first) is logged by the
    next run with the same sink (`catch_up`)."""

    def __init__(self, on_result: Callable[[CellResult], None] | None, store: Store, outcome: SweepOutcome, bar):
        self.on_result, self.store, self.outcome, self.bar = on_result, store, outcome, bar
        self.name = (getattr(on_result, "name", None) or None) if on_result is not None else None
        outcome.logs_resume = self.name is not None
        self.skipped = 0  # results not given to the sink, or that it failed on

    def __call__(self, result: CellResult) -> bool:
        """Give the sink `result`; whether it took it."""
        if self.on_result is None:
            return False
        logged = False
        if self.outcome.sink_error is None:
            try:
                self.on_result(result)
                logged = True
            except Exception as e:  # noqa: BLE001 - a sink must not stop the sweep; said, not hidden
                self.outcome.sink_error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                self.bar.write(f"the result sink failed on {result.cell.label} ({self.outcome.sink_error}); the "
                               "sweep goes on without it, and every cell is still stored")
        self.skipped += not logged
        if self.name:
            self.store.settle_log(result.cell.key, self.name, logged)
        return logged

    def catch_up(self, cells: list[Cell]) -> None:
        """Log the recorded cells of `cells` whose log to this sink is pending and that no live run is
        delivering, from the stored rows (as the run returned them)."""
        pending = self.store.pending_logs(self.name) if self.name else set()
        for cell in cells:
            # A failed cell is run again now, and that result is logged.
            if cell.key not in pending or self.outcome.sink_error or self.store.status(cell.key) != "done":
                continue
            if self.store.take_pending_log(cell.key, self.name) and self(stored_result(self.store, cell)):
                self.outcome.caught_up += 1

    def unlogged(self, cells: list[Cell]) -> int:
        """How many of `cells` this sink has not logged, as the run ends."""
        if self.on_result is None:
            return 0
        if self.name:
            return len(self.store.pending_logs(self.name) & {c.key for c in cells})
        return self.skipped


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
