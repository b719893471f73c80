"""Which sweep runs sharing one store are alive: one locked file per running run.

Several `qdrift sweep run` processes may write one store (a rerun started while the first still
runs, a W&B agent per cell, a grid split by hand). For each to skip the cells another is running,
and still take over the cells of one that was killed, it must know whether that run is alive. A
pid cannot say so (pids are reused, and a run may hold cells on another process's behalf), so each
run holds an exclusive `flock` on a file of its own in a folder beside the store: the kernel drops
the lock when the process ends, however it ends (`kill -9` included), and never hands it to
another process. flock, not POSIX record locks, because a process's own record locks never
conflict with each other and closing any descriptor of the file drops them all.

SQLite's WAL mode, which the store uses, needs every process on one machine, and so do these locks.
"""

from __future__ import annotations

import os
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; runs sharing a store then each run every pending cell
    fcntl = None

MAX_SLOTS = 4096


def supported() -> bool:
    """Whether this platform has the locks (Linux, macOS, the BSDs)."""
    return fcntl is not None


class RunSlot:
    """This run's slot: the number of the lock file it holds in `folder`, until `close()`."""

    def __init__(self, folder: Path):
        if fcntl is None:
            raise RuntimeError("run slots need fcntl.flock, which this platform lacks")
        folder.mkdir(exist_ok=True)
        for slot in range(MAX_SLOTS):
            fd = _try_lock(folder, slot)
            if fd is not None:
                self.slot, self._fd = slot, fd
                return
        raise RuntimeError(f"all {MAX_SLOTS} run slots in {folder} are held: that many runs cannot share one store")

    def close(self) -> None:
        os.close(self._fd)


def alive(folder: Path, slot: int) -> bool:
    """Whether a run holds `slot` in `folder` now (False on a platform without flock)."""
    if fcntl is None or not (folder / str(slot)).exists():
        return False
    fd = _try_lock(folder, slot)
    if fd is None:
        return True
    os.close(fd)  # closing the only descriptor releases the probe's lock
    return False


def _try_lock(folder: Path, slot: int) -> int | None:
    """A descriptor holding slot `slot`'s lock, or None when another run holds it."""
    fd = os.open(folder / str(slot), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
