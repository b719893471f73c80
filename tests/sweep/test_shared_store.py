"""Two `qdrift sweep run` processes on one store: they split the cells, and when one is killed with
`kill -9` the other finishes its cells. Every cell is recorded once, by one attempt."""

import os
import re
import signal
import sqlite3
import time

import pytest

from qdrift import run_slots
from qdrift.sweep import parse_sweep, unique_cells
from tests.sweep.test_kill import TEXT, done_cells, start


@pytest.mark.skipif(not run_slots.supported(), reason="no flock on this platform")
def test_two_runs_on_one_store_split_the_cells_and_the_survivor_of_a_kill_finishes_them(tmp_path):
    sweep, store = tmp_path / "shared.yaml", tmp_path / "shared.sqlite"
    sweep.write_text(TEXT)
    expected = {c.key for c in unique_cells(parse_sweep(TEXT))}
    killed, survivor = start(sweep, store), start(sweep, store)
    deadline = time.time() + 120
    while len(done_cells(store)) < 2 and killed.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    out, err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0, err.decode()[-2000:]
    assert killed.returncode == -signal.SIGKILL, "the kill came after the first run had finished"
    db = sqlite3.connect(store)
    cells = db.execute("SELECT key, status, attempts FROM cells").fetchall()
    assert sorted(k for k, *_ in cells) == sorted(expected)
    assert {(s, a) for _, s, a in cells} == {("done", 1)}  # no cell run twice, none lost with the killed run
    summary = re.search(r"(\d+) already done, (\d+) run now(?:, (\d+) finished by another run sharing the store)?, "
                        r"0 failed", out.decode())
    assert summary, out.decode()
    already, ran, elsewhere = (int(g or 0) for g in summary.groups())
    assert already + ran + elsewhere == len(expected) and ran < len(expected)  # the killed run did some
