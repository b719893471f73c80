"""Run locks: held while a run lives, gone when its process ends, however it ends."""

import os
import signal
import subprocess
import sys

import pytest

from qdrift import run_locks

pytestmark = pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")


def test_a_lock_is_alive_until_closed_and_probes_never_make_a_dead_one_look_alive(tmp_path):
    tmp_path = tmp_path / "runs"
    a, b = run_locks.RunLock(tmp_path), run_locks.RunLock(tmp_path)
    assert a.token != b.token and run_locks.alive(tmp_path, a.token) and run_locks.alive(tmp_path, b.token)
    a.close()
    assert not run_locks.alive(tmp_path, a.token) and run_locks.alive(tmp_path, b.token)
    assert not run_locks.alive(tmp_path, "0123456789abcdef")  # never held
    b.close()
    assert not tmp_path.exists()  # the last run to end cleanly leaves no folder


def _hold_in_child(folder):
    code = ("import sys, time; from pathlib import Path; from qdrift import run_locks; "
            "lock = run_locks.RunLock(Path(sys.argv[1])); print(lock.token, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    return child, child.stdout.readline().strip()


def test_a_process_killed_with_sigkill_is_dead_and_its_file_is_removed_by_the_next_run(tmp_path):
    child, token = _hold_in_child(tmp_path)
    try:
        assert run_locks.alive(tmp_path, token)
        probes = [run_locks.alive(tmp_path, token) for _ in range(200)]  # shared probes: always alive
        assert all(probes)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert not run_locks.alive(tmp_path, token)
    assert (tmp_path / token).exists()  # a killed run cannot delete its file
    mine = run_locks.RunLock(tmp_path)
    assert sorted(os.listdir(tmp_path)) == [mine.token]  # the next run removes it
    mine.close()
