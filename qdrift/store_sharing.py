"""How sweep runs sharing one results store split its cells and its result-sink logs.

A mixin of `qdrift.store.Store` (its connection, transactions and tables): each run holds a lock
(`qdrift.run_locks`) while it runs cells, claims a cell just before running it, and skips those
another live run holds; a cell started by a run that is no longer alive was interrupted. A result
sink's log of each recorded cell is pending until logged, and taken by one run at a time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from contextlib import contextmanager
from pathlib import Path

from qdrift import run_locks


class SharedRuns:
    """Claims of cells and pending sink logs, over the store's `started`, `holds` and `pending_logs` tables."""

    _run: run_locks.RunLock | None = None  # held while a sweep runs cells into the store (`running`)

    @contextmanager
    def running(self):
        """Hold a run lock while a sweep runs cells into this store, so that other runs sharing it see
        which cells this one is running (`claim`). Without flock (Windows) nothing is held, and runs
        sharing a store each run every pending cell."""
        if not run_locks.supported() or self._run is not None:
            yield
            return
        self._run = run_locks.RunLock(self._locks_folder)
        try:
            yield
        finally:
            self._run.close()
            self._run = None

    @property
    def _token(self) -> str | None:
        return self._run.token if self._run is not None else None

    @property
    def _locks_folder(self) -> Path:
        # Resolved: a run reaching the store through a symlink must find the same locks.
        return Path(f"{self.path.resolve()}-runs")

    def claim(self, key: str, seen_attempts: int | None = None) -> str:
        """Take cell `key` for this run: 'ours' (noted as started), or why not (`peek`)."""
        with self._transaction() as db:
            state = self.peek(key, seen_attempts)
            if state == "free":
                state = "ours"
                db.execute("INSERT OR REPLACE INTO started VALUES (?, ?)", (key, time.time()))
                if self._run is not None:
                    db.execute("INSERT OR REPLACE INTO holds VALUES (?, ?, ?)", (key, self._token, os.getpid()))
        return state

    def peek(self, key: str, seen_attempts: int | None = None) -> str:
        """Whether cell `key` is 'done'; 'failed' by another run since this one saw it with
        `seen_attempts` attempts (0: never recorded; a rerun retries it); 'held' by another live run
        sharing the store; or 'free' to run."""
        found = self._db.execute("SELECT status, attempts FROM cells WHERE key = ?", (key,)).fetchone()
        if found is not None and found[0] == "done":
            return "done"
        if found is not None and seen_attempts is not None and found[1] > seen_attempts:
            return "failed"
        return "held" if self._held_elsewhere(key) else "free"

    def attempts(self) -> dict[str, int]:
        """{key: attempts recorded} of every recorded cell."""
        return dict(self._db.execute("SELECT key, attempts FROM cells").fetchall())

    def _alive_elsewhere(self, token: str | None) -> bool:
        """Whether `token` names a live run other than this one."""
        return token is not None and token != self._token and run_locks.alive(self._locks_folder, token)

    def _held_elsewhere(self, key: str) -> bool:
        """Whether another run that is still alive started cell `key`."""
        found = self._db.execute("SELECT token FROM holds WHERE key = ?", (key,)).fetchone()
        return found is not None and self._alive_elsewhere(found[0])

    def holders(self, keys: Iterable[str]) -> list[int]:
        """The process ids of the live runs holding any of `keys`."""
        keys = list(keys)
        found = self._db.execute(f"SELECT DISTINCT token, pid FROM holds WHERE key IN ({','.join('?' * len(keys))})",
                                 keys).fetchall()
        return sorted({pid for token, pid in found if self._alive_elsewhere(token)})

    def interrupted(self) -> set[str]:
        """Keys of cells a run started and never recorded (killed or crashed while running them); a
        cell another live run is running now is not one."""
        keys = {k for (k,) in self._db.execute(
            "SELECT s.key FROM started s LEFT JOIN cells c ON c.key = s.key WHERE c.status IS NOT 'done'")}
        return {k for k in keys if not self._held_elsewhere(k)}

    # --- result sinks ------------------------------------------------------------------------
    def pending_logs(self, sink: str) -> set[str]:
        """Keys of recorded cells `sink` has not logged."""
        return {k for (k,) in self._db.execute("SELECT key FROM pending_logs WHERE sink = ?", (sink,))}

    def take_pending_log(self, key: str, sink: str) -> bool:
        """Take the pending log of cell `key` to `sink` for this run: False when there is none, or a
        live run is delivering it."""
        with self._transaction() as db:
            found = db.execute("SELECT token FROM pending_logs WHERE key = ? AND sink = ?", (key, sink)).fetchone()
            taken = found is not None and not self._alive_elsewhere(found[0])
            if taken:
                db.execute("UPDATE pending_logs SET token = ? WHERE key = ? AND sink = ?", (self._token, key, sink))
        return taken

    def settle_log(self, key: str, sink: str, logged: bool) -> None:
        """Clear this run's pending log of `key` to `sink` once logged; else leave it to the next run.
        A row another run has since taken (it recorded the cell again) is that run's to settle."""
        if logged:
            self._db.execute("DELETE FROM pending_logs WHERE key = ? AND sink = ? AND token IS ?",
                             (key, sink, self._token))
        else:
            self._db.execute("UPDATE pending_logs SET token = NULL WHERE key = ? AND sink = ? AND token IS ?",
                             (key, sink, self._token))
