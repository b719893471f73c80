"""A real `kill -9` in the middle of a sweep: the rerun completes it with every cell exactly once."""

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from qdrift.sweep import parse_sweep, unique_cells

ROOT = Path(__file__).resolve().parents[2]
TEXT = """\
name: killed
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16, w4g32-a16-kv:16, w6-a16-kv:16]
tasks:
  - env: ledger
    horizons: [1, 2]
    seeds: 2
    max_new_tokens: 8
threads: 1
"""


def start(sweep: Path, store: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "qdrift.cli", "sweep", "run", str(sweep), "--store", str(store),
                             "--quiet"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def done_cells(store: Path) -> dict[str, tuple]:
    if not store.exists():
        return {}
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute("SELECT key, created, finished, attempts FROM cells WHERE status = 'done'").fetchall()
    except sqlite3.OperationalError:  # the schema is not written yet
        rows = []
    finally:
        db.close()
    return {key: tuple(rest) for key, *rest in rows}


def test_kill_9_mid_sweep_then_rerun_leaves_every_cell_once_and_keeps_the_finished_ones(tmp_path):
    sweep, store = tmp_path / "killed.yaml", tmp_path / "killed.sqlite"
    sweep.write_text(TEXT)
    expected = {c.key: c for c in unique_cells(parse_sweep(TEXT))}
    proc = start(sweep, store)
    deadline = time.time() + 120
    before: dict[str, tuple] = {}
    while not before and proc.poll() is None and time.time() < deadline:
        time.sleep(0.02)
        before = done_cells(store)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    before = done_cells(store)  # whatever committed before the kill landed
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    assert 1 <= len(before) < len(expected), f"kill came too late or too early: {len(before)} done"

    rerun = start(sweep, store)
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
    assert db.execute("SELECT COUNT(*) FROM rows WHERE cell NOT IN (SELECT key FROM cells)").fetchone()[0] == 0
    for key, cell in expected.items():
        episodes = db.execute("SELECT COUNT(*), SUM(json_extract(data, '$.steps')), "
                              "COUNT(DISTINCT json_extract(data, '$.seed')) FROM rows "
                              "WHERE cell = ? AND kind = 'episode'", (key,)).fetchone()
        assert episodes[0] == episodes[2] == len(cell.task.seeds)
        steps = db.execute("SELECT COUNT(*), COUNT(DISTINCT json_extract(data, '$.episode') || '/' || "
                           "json_extract(data, '$.step')) FROM rows WHERE cell = ? AND kind = 'step'", (key,)).fetchone()
        assert steps[0] == steps[1] == episodes[1]  # one row per step taken, no duplicates
