"""Two `qdrift sweep run` processes on one store: they split the cells, and when one is killed with
`kill -9` the other finishes its cells. Every cell is recorded once, by one attempt."""

import os
import re
import signal
import sqlite3
import time

import pytest

from qdrift import run_locks
from qdrift.sweep import parse_sweep, unique_cells
from tests.sweep.test_kill import TEXT, done_cells, start


def holding_pids(store) -> set[int]:
    """The pids of the runs holding a cell now, read as another process would."""
    if not store.exists():
        return set()
    db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
    try:
        return {pid for (pid,) in db.execute("SELECT pid FROM holds")}
    except sqlite3.OperationalError:  # the schema is not written yet
        return set()
    finally:
        db.close()


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_two_runs_on_one_store_split_the_cells_and_the_survivor_of_a_kill_finishes_them(tmp_path):
    sweep, store = tmp_path / "shared.yaml", tmp_path / "shared.sqlite"
    sweep.write_text(TEXT.replace("horizons: [1, 2]", "horizons: [1, 2, 3]"))
    expected = {c.key for c in unique_cells(parse_sweep(sweep.read_text()))}
    killed, survivor = start(sweep, store), start(sweep, store)
    deadline, seen = time.time() + 180, set()
    # Both runs have held cells (so they ran side by side) and one cell is done: then kill one.
    while (seen != {killed.pid, survivor.pid} or not done_cells(store)) and killed.poll() is None \
            and time.time() < deadline:
        seen |= holding_pids(store)
        time.sleep(0.01)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err.decode()[-2000:]
    assert killed.returncode == -signal.SIGKILL, "the kill came after the first run had finished"
    assert seen == {killed.pid, survivor.pid}
    db = sqlite3.connect(store)
    cells = db.execute("SELECT key, status, attempts FROM cells").fetchall()
    assert sorted(k for k, *_ in cells) == sorted(expected)
    assert {(s, a) for _, s, a in cells} == {("done", 1)}  # no cell run twice, none lost with the killed run
    summary = re.search(r"(\d+) already done, (\d+) run now(?:, (\d+) finished by another run sharing the store)?, "
                        r"0 failed", out.decode())
    assert summary, out.decode()
    assert sum(int(g or 0) for g in summary.groups()) == len(expected)
