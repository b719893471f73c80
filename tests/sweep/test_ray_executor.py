"""Sweeps on a local Ray cluster of two workers: the same stored rows as the local executor, failures
recorded, finished cells skipped, and a `kill -9` of the driver losing and duplicating nothing.

One cluster serves the module (Ray takes seconds to start); `-m "not ray"` deselects these tests.
"""

import json
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from qdrift import run_locks
from qdrift.code_fingerprint import running_code
from qdrift.store import Store
from qdrift.sweep import Cell, LocalExecutor, parse_sweep, run_sweep, unique_cells
from qdrift.sweep.execute import executor_for
from qdrift.sweep.runners import CellRunner
from tests.sweep.test_kill import done_cells

ROOT = Path(__file__).resolve().parents[2]
TEXT = """\
name: r
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: ledger
    horizons: [1, 2]
    seeds: 2
    max_new_tokens: 8
threads: 1
"""


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs in its own temp dir; yields its address for other drivers."""
    import ray

    # The runners below live in this test module: ship them by value, whatever the workers' sys.path.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    temp = tempfile.mkdtemp(prefix="qdrift-ray-test-")
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False, _temp_dir=temp)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def on_ray(sweep, workers=2):
    return executor_for(replace(sweep, executor="ray", workers=workers))


def contents(store: Store) -> tuple[list, list]:
    """The store without timings: each cell's key, config, status and attempts, and every row."""
    cells = sorted((c["key"], json.dumps(c["config"], sort_keys=True), c["status"], c["attempts"], c["rows"])
                   for c in store.cells())
    rows = sorted(store._db.execute("SELECT cell, kind, data FROM rows").fetchall())
    return cells, rows


@pytest.mark.ray
def test_a_ray_sweep_stores_exactly_the_rows_of_a_local_one_and_a_rerun_skips_every_cell(cluster, tmp_path):
    sweep = parse_sweep(TEXT)
    with Store(tmp_path / "local.sqlite") as local, Store(tmp_path / "ray.sqlite") as on_cluster:
        assert run_sweep(sweep, local, LocalExecutor(CellRunner(batch=sweep.batch), threads=1), progress=False).done == 4
        outcome = run_sweep(sweep, on_cluster, on_ray(sweep), progress=False)
        assert (outcome.done, outcome.failed) == (4, [])
        cells, rows = contents(on_cluster)
        assert len(cells) == 4 and {c[2] for c in cells} == {"done"}
        assert sum(1 for _, kind, _ in rows if kind == "episode") == 4 * 2  # 2 seeds per cell
        assert (cells, rows) == contents(local)  # same cells, same episodes and steps, same logprobs
        again = run_sweep(sweep, on_cluster, on_ray(sweep), progress=False)
        assert (again.skipped, again.done) == (4, 0)
        assert contents(on_cluster) == (cells, rows)


class FaultyRunner:
    """Stands in for the model: fake rows; raises in the cell labelled `raise_in`, kills its worker in `exit_in`."""

    def __init__(self, raise_in: str = "", exit_in: str = ""):
        self.raise_in, self.exit_in = raise_in, exit_in

    def __call__(self, cell: Cell):
        if cell.label == self.raise_in:
            raise RuntimeError(f"boom in {cell.label}")
        if cell.label == self.exit_in:
            os._exit(3)  # the worker process dies as in a native crash or an out-of-memory kill
        return {"episode": [{"episode": i, "env": "ledger", "horizon": cell.horizon, "seed": s, "trial": 0,
                             "success": True, "steps": cell.horizon, "first_error_step": None}
                            for i, s in enumerate(cell.task.seeds)]}


@pytest.mark.ray
def test_a_raising_cell_and_a_dead_worker_are_failed_cells_the_rest_finish_and_a_rerun_retries_them(
        cluster, tmp_path, capfd):
    from qdrift.sweep.ray_executor import RayExecutor

    sweep = parse_sweep(TEXT.replace("[1, 2]", "[1, 2, 3]"))
    raising, dying = "tiny:llama baseline ledger L=2", "tiny:llama w8-a16-kv:16 ledger L=1"
    with Store(tmp_path / "r.sqlite") as store:
        # 3 workers asked of a 2-CPU cluster: 2 run (a third could never be placed, and its cells would wait forever).
        faulty = RayExecutor(partial(FaultyRunner, raise_in=raising, exit_in=dying), workers=3)
        outcome = run_sweep(sweep, store, faulty, progress=False)
        assert "hold 2 worker(s) of 1 thread(s); running 2, not 3" in capfd.readouterr().err
        assert outcome.done == 4 and dict(outcome.failed)[raising] == f"RuntimeError: boom in {raising}"
        assert dict(outcome.failed)[dying].startswith("WorkerLost: the Ray worker running this cell failed")
        errors = {c["config"]["spec"] + str(c["config"]["horizon"]): c["error"] for c in store.cells("failed")}
        assert "Traceback" in errors["baseline2"] and "ActorDiedError" in errors["w8-a16-kv:161"]
        retry = run_sweep(sweep, store, RayExecutor(FaultyRunner, workers=2), progress=False)
        assert (retry.skipped, retry.done, retry.failed) == (4, 2, [])
        assert sorted(c["attempts"] for c in store.cells("done")) == [1, 1, 1, 1, 2, 2]


KILLED = TEXT.replace("specs: [baseline, w8-a16-kv:16]", "specs: [baseline, w8-a16-kv:16, w4g32-a16-kv:16]")


def start(sweep: Path, store: Path, *args: str, tmp: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **({"TMPDIR": tmp} if tmp else {})}
    return subprocess.Popen([sys.executable, "-m", "qdrift.cli", "sweep", "run", str(sweep), "--store", str(store),
                             "--quiet", "--executor", "ray", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def processes_under(path: str) -> list[int]:
    """Pids whose command line names `path` (the Ray processes of a cluster in that temp dir)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if path.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.ray
def test_kill_9_of_a_ray_sweep_driver_then_rerun_keeps_every_finished_cell_once(cluster, tmp_path):
    sweep, store = tmp_path / "killed.yaml", tmp_path / "killed.sqlite"
    sweep.write_text(KILLED)
    expected = {c.key: c for c in unique_cells(parse_sweep(KILLED))}
    ray_tmp = tempfile.mkdtemp(prefix="qr")  # short: Ray's socket paths under it must stay < 108 bytes
    try:
        proc = start(sweep, store, "--workers", "2", tmp=ray_tmp)  # its own local cluster
        deadline, before = time.time() + 120, {}
        while not before and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
            before = done_cells(store)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = done_cells(store)
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
        assert 1 <= len(before) < len(expected), f"kill came too late or too early: {len(before)} done"
        if sys.platform.startswith("linux"):  # Ray's processes share the driver's fate: no cluster left behind
            deadline = time.time() + 20
            while processes_under(ray_tmp) and time.time() < deadline:
                time.sleep(0.2)
            assert processes_under(ray_tmp) == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)

    rerun = start(sweep, store, "--ray-address", cluster)  # the rerun joins a running cluster
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()[-2000:]
    assert f"{len(before)} already done, {len(expected) - len(before)} run now, 0 failed" in out.decode()

    db = sqlite3.connect(store)
    cells = db.execute("SELECT key, status, created, finished, attempts FROM cells").fetchall()
    assert sorted(k for k, *_ in cells) == sorted(expected)  # every cell, exactly once
    assert {s for _, s, *_ in cells} == {"done"}
    for key, _, created, finished, attempts in cells:
        if key in before:  # finished before the kill: not run again
            assert (created, finished, attempts) == before[key]
    for key, cell in expected.items():
        n, distinct_seeds = db.execute("SELECT COUNT(*), COUNT(DISTINCT json_extract(data, '$.seed')) FROM rows "
                                       "WHERE cell = ? AND kind = 'episode'", (key,)).fetchone()
        assert n == distinct_seeds == len(cell.task.seeds)
        steps, distinct = db.execute("SELECT COUNT(*), COUNT(DISTINCT json_extract(data, '$.episode') || '/' || "
                                     "json_extract(data, '$.step')) FROM rows WHERE cell = ? AND kind = 'step'",
                                     (key,)).fetchone()
        assert steps == distinct > 0


def _hold_then_finish(path, cell, held, seconds):
    """Another run sharing the store: claims `cell`, sets `held`, finishes it `seconds` later."""
    with Store(path) as other, other.running():
        other.claim(cell.key)
        held.set()
        time.sleep(seconds)
        other.record_done(cell.key, cell.config(), {"episode": []}, time.time(), time.time(),
                          code=running_code())  # as a run of the same code records it


@pytest.mark.ray
@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_a_ray_sweep_leaves_a_cell_another_run_holds_to_that_run(cluster, tmp_path):
    sweep = parse_sweep(TEXT)
    cells, path, held = unique_cells(sweep), tmp_path / "r.sqlite", threading.Event()
    other = threading.Thread(target=_hold_then_finish, args=(path, cells[0], held, 3.0))
    other.start()
    held.wait(10)
    with Store(path) as store:
        from qdrift.sweep.ray_executor import RayExecutor

        outcome = run_sweep(sweep, store, RayExecutor(FaultyRunner, workers=2), progress=False, poll_s=0.2)
        other.join()
        assert (outcome.done, outcome.elsewhere, outcome.failed) == (3, 1, [])
        assert [c["attempts"] for c in store.cells("done")] == [1, 1, 1, 1]


def test_without_ray_installed_the_error_names_the_extra(monkeypatch):
    from qdrift.sweep.ray_executor import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "qdrift\[ray\]"'):
        RayExecutor(CellRunner)
    with pytest.raises(ImportError, match=r'pip install "qdrift\[ray\]"'):
        executor_for(replace(parse_sweep(TEXT), executor="ray"))
