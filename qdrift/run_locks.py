"""Which sweep runs sharing one store are alive: each holds an exclusive lock on a file of its own.

Several `qdrift sweep run` processes may write one store (a rerun started while the first still
runs, a W&B agent per cell, a grid split by hand). For each to skip the cells another is running,
and still take over the cells of one that was killed, it must know whether that run is alive. A
pid cannot say so (pids are reused), so each run makes a file named by a random token in a folder
beside the store and holds an exclusive `flock` on it: the kernel drops the lock when the process
ends, however it ends (`kill -9` included). A token is never reused, so a dead run never looks
alive again. flock, not POSIX record locks, because a process's own record locks never conflict
with each other and closing any descriptor of the file drops them all. Probes take a shared lock,
so two runs probing at once never see each other's probe as a live run.

SQLite's WAL mode, which the store uses, needs every process on one machine, and so do these locks.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no flock; runs sharing a store then each run every pending cell
    fcntl = None


def supported() -> bool:
    """Whether this platform has the locks (Linux, macOS, the BSDs)."""
    return fcntl is not None


class RunLock:
    """This run's lock, held until `close()`: `token` names it in the store's claims."""

    def __init__(self, folder: Path):
        if fcntl is None:
            raise RuntimeError("run locks need fcntl.flock, which this platform lacks")
        self.folder, self.token = folder, secrets.token_hex(8)
        # Locked under a name no probe reads, then renamed: a run looking for dead runs' files never
        # finds this one unlocked.
        hidden = folder / f".new-{self.token}"
        while True:
            folder.mkdir(exist_ok=True)
            try:
                self._fd = os.open(hidden, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                break
            except FileNotFoundError:  # the last run to end removed the empty folder meanwhile
                continue
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
        os.rename(hidden, folder / self.token)
        _remove_dead(folder, self.token)

    def close(self) -> None:
        """Release the lock; the file goes first, so no probe can find it held by an ended run."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.folder / self.token)
        os.close(self._fd)
        with contextlib.suppress(OSError):  # the last run leaves no folder; one still in use is not empty
            self.folder.rmdir()


def alive(folder: Path, token: str) -> bool:
    """Whether the run holding `token` in `folder` is alive (False on a platform without flock)."""
    if fcntl is None:
        return False
    try:
        fd = os.open(folder / token, os.O_RDONLY)
    except FileNotFoundError:  # the run ended cleanly
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _remove_dead(folder: Path, own: str) -> None:
    """Delete the files of runs that were killed (a clean end deletes its own): they never come back."""
    for path in folder.iterdir():
        if path.name != own and not path.name.startswith(".new-") and not alive(folder, path.name):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
