"""Run slots: a lock held while a run lives, gone when its process ends, however it ends."""

import os
import signal
import subprocess
import sys

import pytest

from qdrift import run_slots

pytestmark = pytest.mark.skipif(not run_slots.supported(), reason="no flock on this platform")


def test_runs_in_one_process_take_different_slots_and_a_closed_one_is_not_alive(tmp_path):
    a, b = run_slots.RunSlot(tmp_path), run_slots.RunSlot(tmp_path)
    assert (a.slot, b.slot) == (0, 1)
    assert run_slots.alive(tmp_path, 0) and run_slots.alive(tmp_path, 1)
    a.close()
    assert not run_slots.alive(tmp_path, 0) and run_slots.alive(tmp_path, 1)
    c = run_slots.RunSlot(tmp_path)
    assert c.slot == 0  # the freed slot is taken again
    assert not run_slots.alive(tmp_path, 7)  # never held
    b.close()
    c.close()


def test_a_process_killed_with_sigkill_releases_its_slot(tmp_path):
    code = ("import sys, time; from pathlib import Path; from qdrift import run_slots; "
            "s = run_slots.RunSlot(Path(sys.argv[1])); print(s.slot, flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        slot = int(child.stdout.readline())
        assert run_slots.alive(tmp_path, slot)
        mine = run_slots.RunSlot(tmp_path)
        assert mine.slot != slot  # held by the child
        mine.close()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert not run_slots.alive(tmp_path, slot)
