"""A durable SQLite store of sweep results: one row per cell, its tidy rows beside it.

A cell is one (model, spec, task, horizon, seeds, knobs, qdrift version) measurement, keyed by a
content hash of that configuration (`cell_key`), so a rerun of the same grid finds its finished
cells and skips them, while any change to the configuration makes a new cell. A finished cell's
rows and its `done` mark are written in one transaction: a crash (even `kill -9`) leaves either
the whole cell or nothing, never rows without a cell or a cell marked done with rows missing.
Runs sharing a store claim each cell before running it (`running`, `claim`), so none is run twice
while its run is alive and a killed run's cells are taken over (qdrift.store_sharing).

    store = Store("results.sqlite")
    store.record_done(key, config, {"episode": [...], "step": [...]}, started, finished)
    rows = store.rows("episode")          # tidy dicts with the config columns added: qdrift.stats takes them

Standard library only (pandas lazily for `frame`), so results can be read without torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from qdrift.store_sharing import SharedRuns

SCHEMA_VERSION = 2  # 2: rows may be of kind 'drift' (version 1 stores are migrated on open, losslessly)
KINDS = ("episode", "step", "item", "drift")  # agent episodes, agent steps, short-form items, teacher-forced tokens
STATUSES = ("done", "failed")
# The cell configuration fields copied onto every row read back. They identify the cell and win over a
# row's own fields of the same name, which are kept as `row_<name>` (an lm-eval row names the spec its
# harness ran, e.g. w16-a16-kv:16 for the baseline, which must not relabel the cell).
ROW_CONFIG_COLUMNS = ("model", "config", "spec", "spec_hash", "kind", "task")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cells (
    key TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('done', 'failed')),
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    started REAL,
    finished REAL,
    wall_s REAL,
    created REAL NOT NULL,
    code TEXT  -- sha256 of the qdrift code that measured the cell (qdrift.code_fingerprint); NULL: not recorded
);
-- Cells a run has started and not yet recorded: one left here was interrupted (its process was
-- killed or crashed), and a rerun takes it after the others. Not part of the schema version: an
-- older qdrift ignores the table.
CREATE TABLE IF NOT EXISTS started (key TEXT PRIMARY KEY, at REAL NOT NULL);
-- Which run started each of those cells (its lock's token and pid, qdrift.run_locks): a started cell
-- whose run is still alive is being run, not interrupted.
CREATE TABLE IF NOT EXISTS holds (key TEXT PRIMARY KEY, token TEXT NOT NULL, pid INTEGER NOT NULL);
-- Recorded cells a result sink (W&B, named e.g. 'wandb:entity/project') has not taken yet, written with
-- the cell's record: `token` names the run delivering it (NULL once that run gave up on it), so the
-- next run with the same sink logs the rest, and a cell is never logged by two runs at once.
CREATE TABLE IF NOT EXISTS pending_logs (key TEXT NOT NULL, sink TEXT NOT NULL, token TEXT,
                                         PRIMARY KEY (key, sink));
-- Finished chunks (one batch of seeds each) of agent cells not yet recorded, with the code that ran
-- them, so that a run killed an hour into a long cell resumes after its last finished chunk; a cell's
-- chunks are deleted in the transaction that records it. Not part of the schema version.
CREATE TABLE IF NOT EXISTS chunks (cell TEXT NOT NULL, chunk TEXT NOT NULL, code TEXT, data TEXT NOT NULL,
                                   at REAL NOT NULL, PRIMARY KEY (cell, chunk));
"""
_ROWS = """
CREATE TABLE IF NOT EXISTS {name} (
    id INTEGER PRIMARY KEY,
    cell TEXT NOT NULL REFERENCES cells(key) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ({kinds})),
    data TEXT NOT NULL
);
"""
_INDEX = "CREATE INDEX IF NOT EXISTS rows_by_cell ON rows (cell, kind);"


# In `code_fingerprints()`: results written before qdrift recorded the code that measured them.
UNRECORDED_CODE = "unrecorded"


class CodeChanged(ValueError):
    """The store holds results measured by other qdrift code than the running one."""


class StoreDamaged(ValueError):
    """SQLite's integrity check found damage: a damaged store may answer "done" for cells it lost."""


class WeightsChanged(ValueError):
    """The store pins other weights under a model's name than the ones a cell was measured on."""


def _code_name(code: str | None) -> str:
    """A code fingerprint as messages name it."""
    return ("a qdrift that did not record its code" if code in (None, UNRECORDED_CODE)
            else f"qdrift code sha256 {code[:16]}...")


def _rows_table(name: str) -> str:
    return _ROWS.format(name=name, kinds=", ".join(f"'{k}'" for k in KINDS))


def _plain(value: Any) -> Any:
    """JSON for what json cannot write itself: numpy scalars and arrays as numbers and lists (their
    str() would store "False" or "5" as strings, which read back as true and as text), anything
    else as its str() as before."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def canonical_json(config: Mapping[str, Any]) -> str:
    """The configuration as JSON with sorted keys and no spacing: equal configs, equal text."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)


def cell_key(config: Mapping[str, Any]) -> str:
    """First 16 hex digits of the sha256 of the canonical configuration JSON."""
    return hashlib.sha256(canonical_json(config).encode()).hexdigest()[:16]


def _while_locked(statement, seconds: float = 30.0):
    """Run `statement`, retrying while another process holds the database.

    Switching a new file to WAL answers "database is locked" at once, without SQLite's busy timeout,
    when processes open it together (sweeps started side by side on one new store): one of them lost
    its cells."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class ReadOnlyStore(ValueError):
    """A write to a store opened read-only (its file or folder is not writable)."""


def _not_writable(path: Path) -> bool:
    """Whether an existing store file, or the folder that holds it (where SQLite puts its -wal and -shm
    files), cannot be written by this process (a read-only filesystem answers so even to root)."""
    return path.is_file() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


class Store(SharedRuns):
    """The results of one or more sweeps in one SQLite file (WAL mode: readers never block the writer)."""

    def __init__(self, path: str | Path, read_only: bool | None = None):
        """`read_only` None: read-only exactly when the file exists and it or its folder is not writable
        (a store on a read-only filesystem, or another user's), so that it can still be read (status,
        compare, cards); any write then raises ReadOnlyStore naming the path."""
        self.path = Path(path)
        self._intact = False  # set once check_integrity has passed on this connection
        self.read_only = _not_writable(self.path) if read_only is None else read_only
        try:
            if self.read_only:
                self._db = self._connect_read_only()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # Autocommit mode: every transaction below is an explicit BEGIN ... COMMIT.
                self._db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
                _while_locked(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
                self._db.execute("PRAGMA foreign_keys=ON")
                _while_locked(lambda: self._db.executescript(_SCHEMA))
        except (sqlite3.DatabaseError, OSError) as e:
            kind = ("a folder" if self.path.is_dir() else "held by another process for over 30 s"
                    if "locked" in str(e) else "on a read-only filesystem or in a folder qdrift cannot write"
                    if "readonly" in str(e) or isinstance(e, PermissionError) or _not_writable(self.path)
                    or not os.access(self.path.parent, os.W_OK)
                    else "not a store qdrift can open")
            raise ValueError(f"store {self.path} is {kind} ({type(e).__name__}: {e}); a store is an SQLite file "
                             "qdrift writes: name a new file to start one, or the store a sweep wrote") from None
        if self.read_only:
            self._check_read_only()
            return
        # Stores from before cells recorded their code gain the column at their first write, so that
        # reading one (a card, a status) leaves its file as it was.
        self._code_column = any(col[1] == "code" for col in self._db.execute("PRAGMA table_info(cells)"))
        found = self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if found is None:
            self._db.executescript(_rows_table("rows") + _INDEX)
            self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(found[0]) == 1:
            self._migrate_from_1()
        elif int(found[0]) != SCHEMA_VERSION:
            raise ValueError(f"store {self.path} has schema_version {found[0]}; this qdrift reads version "
                             f"{SCHEMA_VERSION} only (write a new store, or use the qdrift that wrote it)")

    def check_integrity(self) -> None:
        """StoreDamaged unless SQLite's `PRAGMA integrity_check` says ok (checked before a run and before
        reports: a store with damaged pages once answered "20 already done" and crashed `status`). Once
        per open store: a command that opens it checked and then runs a sweep on it reads it once."""
        if self._intact:
            return
        try:
            found = [r[0] for r in self._db.execute("PRAGMA integrity_check(5)")]
        except sqlite3.DatabaseError as e:
            found = [f"{type(e).__name__}: {e}"]
        if found != ["ok"]:
            raise StoreDamaged(
                f"store {self.path} is damaged (SQLite's integrity check: {'; '.join(found)}); nothing was run "
                "or read from it. Keep the file, recover what SQLite can into a new one "
                f"(`sqlite3 {self.path} .recover | sqlite3 recovered.sqlite`), or move it away to start afresh")
        self._intact = True

    def _connect_read_only(self) -> sqlite3.Connection:
        """A read-only connection (`mode=ro`), which still sees what a writer commits meanwhile. SQLite
        needs the WAL index (`-shm`) beside a WAL store to read it; where none is there and none can be
        made (a read-only folder), the store is opened `immutable=1`, which reads the file as it is
        without any locking: safe only because nothing can write to that folder, and only when no
        write-ahead log holds commits the file lacks (they would be missed), which is refused instead."""
        if not self.path.is_file():
            raise FileNotFoundError(f"no store file at {self.path}")
        uri = f"file:{quote(str(self.path.resolve()))}"
        shm, wal = (Path(f"{self.path}{x}") for x in ("-shm", "-wal"))
        if shm.exists() or os.access(self.path.parent, os.W_OK):
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None, timeout=30)
        elif wal.exists() and wal.stat().st_size > 0:
            raise ReadOnlyStore(
                f"store {self.path} is read-only and its write-ahead log {wal} holds commits the store file "
                "lacks, which SQLite cannot read without a WAL index beside it; copy the store with its -wal "
                "file to a writable folder and read it there")
        else:
            db = sqlite3.connect(f"{uri}?immutable=1", uri=True, isolation_level=None)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # a file that is not SQLite fails here
        return db

    def _check_read_only(self) -> None:
        """What __init__ checks of a store it cannot write (no schema is made, no old version migrated)."""
        tables = {name for (name,) in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"meta", "cells", "rows"} <= tables:
            raise ValueError(f"store {self.path} (read-only) is not a store qdrift wrote: it has no meta, cells "
                             "and rows tables; name the store a sweep wrote")
        # Tables a store made by an older qdrift may lack, empty: nothing of it started or is pending.
        for name in ("started", "holds", "pending_logs", "chunks"):
            if name not in tables:
                statement = _SCHEMA[_SCHEMA.index(f"CREATE TABLE IF NOT EXISTS {name} "):]  # to its `;`, lines and all
                self._db.execute(statement[:statement.index(";") + 1].replace("CREATE TABLE", "CREATE TEMP TABLE"))
        self._code_column = any(col[1] == "code" for col in self._db.execute("PRAGMA table_info(cells)"))
        found = self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()
        if found is None or int(found[0]) not in (1, SCHEMA_VERSION):
            raise ValueError(f"store {self.path} has schema_version {found and found[0]}; this qdrift reads "
                             f"version {SCHEMA_VERSION} (and 1) only (use the qdrift that wrote it)")

    def require_writable(self) -> None:
        """Raise ReadOnlyStore if this store was opened read-only."""
        if self.read_only:
            raise ReadOnlyStore(
                f"store {self.path} is read-only (the file or its folder is not writable, e.g. a read-only "
                "filesystem): it can be read (sweep status, compare, cards) but not written; name a store in "
                "a writable folder, or copy this one there to resume it")

    @contextmanager
    def _transaction(self):
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any error: all of it is written, or none."""
        self.require_writable()
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def _has_code(self) -> bool:
        """Whether the `cells` table has the `code` column, looked up again until it has (another process
        sharing the store may add it with its first write)."""
        if not self._code_column:
            self._code_column = any(col[1] == "code" for col in self._db.execute("PRAGMA table_info(cells)"))
        return self._code_column

    def _add_code_column(self) -> None:
        """Give a store from before cells recorded their code the `code` column (NULL in its cells: not
        recorded). Not part of the schema version: an older qdrift names its columns and ignores it."""
        if self._has_code():
            return
        try:
            _while_locked(lambda: self._db.execute("ALTER TABLE cells ADD COLUMN code TEXT"))
        except sqlite3.OperationalError as e:  # another process writing to the store added it first
            if "duplicate column" not in str(e):
                raise
        self._code_column = True

    def _migrate_from_1(self) -> None:
        """Version 1 allowed row kinds episode, step and item only, in a CHECK that SQLite cannot alter:
        copy the rows into a table with the current kinds, in one transaction (all or nothing)."""
        with self._transaction() as db:
            db.execute(_rows_table("rows_v2"))
            db.execute("INSERT INTO rows_v2 (id, cell, kind, data) SELECT id, cell, kind, data FROM rows")
            db.execute("DROP TABLE rows")
            db.execute("ALTER TABLE rows_v2 RENAME TO rows")
            db.execute(_INDEX)
            db.execute("UPDATE meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        return int(self._db.execute("SELECT value FROM meta WHERE name = 'schema_version'").fetchone()[0])

    # --- writing ---------------------------------------------------------------------------
    def record_done(self, key: str, config: Mapping[str, Any], rows: Mapping[str, Iterable[Mapping]],
                    started: float, finished: float, sink: str | None = None, code: str | None = None,
                    allow_other_code: bool = True, weights: tuple[str, str] | None = None) -> None:
        """Write a finished cell and all its rows (`{kind: [row, ...]}`) in one transaction; with `sink`,
        note that sink's log of it as pending, to be cleared once it is logged (`pending_log`).

        `code`: the fingerprint of the code that measured it (`qdrift.code_fingerprint`), None if
        unknown. With `allow_other_code=False`, a cell whose code differs from any other done cell's
        raises CodeChanged and writes nothing (runs of two codes that started on one store together, a
        worker on another checkout). `weights` (model reference, weights sha256, as `check_model` took
        them): a store that now pins other weights under that name raises WeightsChanged, writing nothing
        (another run re-pinned it before either recorded a result)."""
        bad = sorted(set(rows) - set(KINDS))
        if bad:
            raise ValueError(f"row kind {bad[0]!r} is not one of {', '.join(KINDS)}")
        # A generator: rows are serialised inside the transaction, so a row that fails rolls back the cell.
        payload = ((key, kind, json.dumps(dict(r), default=_plain)) for kind, rs in rows.items() for r in rs)
        self._write(key, config, "done", None, started, finished, payload, sink, code, allow_other_code, weights)

    def record_failed(self, key: str, config: Mapping[str, Any], error: str, started: float, finished: float,
                      sink: str | None = None) -> bool:
        """Mark a cell failed with its error (no rows), so the sweep goes on and a rerun retries it. It
        credits no code (`code` stays NULL): an older qdrift that later finishes it leaves the column as it is.

        A cell another process has meanwhile finished stays done with its rows (returns False): a
        failed attempt never deletes results.
        """
        return self._write(key, config, "failed", error, started, finished, [], sink)

    def _write(self, key, config, status, error, started, finished, payload, sink=None, code=None,
               allow_other_code=True, weights=None) -> bool:
        self._add_code_column()
        with self._transaction() as db:
            if status == "failed":
                now = db.execute("SELECT status FROM cells WHERE key = ?", (key,)).fetchone()
                if now is not None and now[0] == "done":
                    return False  # nothing written yet: the transaction commits nothing
            elif not allow_other_code:
                other = db.execute("SELECT code FROM cells WHERE status = 'done' AND key != ? AND code IS NOT ? "
                                   "LIMIT 1", (key, code)).fetchone()
                if other is not None:
                    raise CodeChanged(
                        f"cell {key} was measured by {_code_name(code)}, but the store already holds "
                        f"results measured by {_code_name(other[0])} (runs of different code sharing the store, or "
                        "a worker on another checkout); it is not recorded: run it with the code of the store's "
                        "results, or allow the change (--allow-code-change)")
            if status == "done" and weights is not None:  # pinned here if no run has yet (check_model's pin)
                db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (f"model:{weights[0]}", weights[1]))
                pinned = db.execute("SELECT value FROM meta WHERE name = ?", (f"model:{weights[0]}",)).fetchone()
                if pinned[0] != weights[1]:
                    raise WeightsChanged(
                        f"cell {key} was measured on weights sha256 {weights[1][:16]}... of model '{weights[0]}', "
                        f"but the store now pins weights sha256 {pinned[0][:16]}... under that name (another run "
                        "with other weights started on it before either recorded a result); it is not recorded: "
                        "give different weights different names, or runs of one set of weights one store")
            db.execute("DELETE FROM rows WHERE cell = ?", (key,))
            db.execute(
                "INSERT INTO cells (key, config, status, error, attempts, started, finished, wall_s, created, code) "
                "VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET config = excluded.config, "
                "status = excluded.status, error = excluded.error, attempts = cells.attempts + 1, "
                "started = excluded.started, finished = excluded.finished, wall_s = excluded.wall_s, "
                "code = excluded.code",
                (key, canonical_json(config), status, error, started, finished, finished - started, time.time(),
                 code))
            db.executemany("INSERT INTO rows (cell, kind, data) VALUES (?, ?, ?)", payload)
            if status == "done":
                db.execute("DELETE FROM chunks WHERE cell = ?", (key,))
            db.execute("DELETE FROM started WHERE key = ?", (key,))
            db.execute("DELETE FROM holds WHERE key = ?", (key,))
            if sink is not None:
                db.execute("INSERT OR REPLACE INTO pending_logs VALUES (?, ?, ?)", (key, sink, self._token))
        return True

    def save_chunk(self, key: str, chunk: str, rows: Mapping[str, Iterable[Mapping]], code: str | None) -> None:
        """Keep one finished chunk of the not yet recorded cell `key` (`{kind: [row, ...]}`), measured by `code`."""
        data = json.dumps({kind: [dict(r) for r in rs] for kind, rs in rows.items()}, default=_plain)
        with self._transaction() as db:
            db.execute("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)", (key, chunk, code, data, time.time()))

    def chunk_rows(self, key: str, chunk: str, code: str | None) -> dict[str, list[dict]] | None:
        """A kept chunk's rows, or None: none kept, or kept from other code than `code` (never mixed in)."""
        found = self._db.execute("SELECT code, data FROM chunks WHERE cell = ? AND chunk = ?", (key, chunk)).fetchone()
        if found is None or found[0] != code:
            return None
        return json.loads(found[1])

    def chunk_count(self, key: str | None = None) -> int:
        """Chunks kept for cell `key` (every cell's with None)."""
        if key is None:
            return self._db.execute("SELECT count(*) FROM chunks").fetchone()[0]
        return self._db.execute("SELECT count(*) FROM chunks WHERE cell = ?", (key,)).fetchone()[0]

    def check_model(self, ref: str, fingerprint: str) -> None:
        """Record the weights' fingerprint of model `ref` on first use; raise if the store holds another.

        Cells are keyed by the reference, not the weights, so this is what keeps results measured
        on different weights under one name from being resumed into (and reported as) one model.
        """
        name = f"model:{ref}"
        with self._transaction() as db:  # one step: no other run records a result between look and re-pin
            db.execute("INSERT OR IGNORE INTO meta VALUES (?, ?)", (name, fingerprint))
            stored = db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()[0]
            if stored != fingerprint and not self._has_results(ref):
                # The other weights left no result (every cell of theirs failed): nothing would mix.
                db.execute("UPDATE meta SET value = ? WHERE name = ?", (fingerprint, name))
                stored = fingerprint
        if stored != fingerprint:
            raise ValueError(
                f"store {self.path} holds results of model '{ref}' with weights sha256 {stored[:16]}..., but "
                f"'{ref}' now loads weights sha256 {fingerprint[:16]}...; resuming would mix the two. Write "
                f"to a new store (or delete this one to re-measure), or restore the weights it was run with")

    def check_code(self, fingerprint: str, allow_change: bool = False) -> None:
        """Raise if any done cell was measured by other code than `fingerprint` (`qdrift.code_fingerprint`),
        unless `allow_change`. Writes nothing: each cell records its own code when it is recorded.

        Cells are keyed by the qdrift version, which code edits leave as it is, so this is what keeps
        a store resumed after a change to scoring, quantization or an environment from mixing the two.
        """
        other = [c for c in self.code_fingerprints() if c != fingerprint]
        if other and not allow_change:
            measured = " and ".join(f"by {_code_name(c)}" for c in other)
            raise CodeChanged(
                f"store {self.path} holds results measured {measured}, but this qdrift's code (its sources, "
                f"built-in environments and task files: qdrift.code_fingerprint) is sha256 {fingerprint[:16]}...; "
                "resuming would mix results of different code in one store, reported as one. Write to a new store "
                "(or delete this one to re-measure); or, where the change cannot alter any result, allow it "
                "(--allow-code-change; run_sweep(..., allow_code_change=True)): each cell keeps the code that "
                "measured it")

    def code_fingerprints(self) -> list[str]:
        """The fingerprints of the code that measured this store's done cells, in the order each first
        finished one; UNRECORDED_CODE for cells recorded before qdrift recorded its code."""
        column = "code" if self._has_code() else "NULL"
        found = self._db.execute(f"SELECT {column} AS c FROM cells WHERE status = 'done' GROUP BY c "
                                 "ORDER BY MIN(finished)")
        return [code or UNRECORDED_CODE for (code,) in found]

    def _has_results(self, ref: str) -> bool:
        """Whether any done cell of model `ref` is stored."""
        return self._db.execute("SELECT 1 FROM cells WHERE status = 'done' AND json_extract(config, '$.model') = ? "
                                "LIMIT 1", (ref,)).fetchone() is not None

    def model_fingerprints(self) -> dict[str, str]:
        """{model reference: weights sha256} for every model this store has run."""
        rows = self._db.execute("SELECT name, value FROM meta WHERE name LIKE 'model:%'").fetchall()
        return {name.split(":", 1)[1]: value for name, value in rows}

    # --- reading ---------------------------------------------------------------------------
    def status(self, key: str) -> str | None:
        """'done', 'failed', or None for a cell never recorded."""
        found = self._db.execute("SELECT status FROM cells WHERE key = ?", (key,)).fetchone()
        return found[0] if found else None

    def cells(self, status: str | None = None) -> list[dict[str, Any]]:
        """Every recorded cell as a dict: key, config (a dict), status, error, attempts, timings, code, rows."""
        if status is not None and status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)} or None, got {status!r}")
        return self._cells(" WHERE c.status = ?", (status,)) if status else self._cells("", ())

    def cell(self, key: str) -> dict[str, Any] | None:
        """One recorded cell as `cells()` gives it, or None."""
        found = self._cells(" WHERE c.key = ?", (key,))
        return found[0] if found else None

    def _cells(self, where: str, args: tuple) -> list[dict[str, Any]]:
        query = ("SELECT c.key, c.config, c.status, c.error, c.attempts, c.started, c.finished, c.wall_s, "
                 f"c.created, {'c.code' if self._has_code() else 'NULL'}, "
                 "(SELECT COUNT(*) FROM rows r WHERE r.cell = c.key) FROM cells c")
        names = ("key", "config", "status", "error", "attempts", "started", "finished", "wall_s", "created", "code",
                 "rows")
        out = []
        for rec in self._db.execute(query + where + " ORDER BY c.created, c.key", args):
            cell = dict(zip(names, rec, strict=True))
            cell["config"] = json.loads(cell["config"])
            out.append(cell)
        return out

    def cell_rows(self, key: str) -> dict[str, list[dict[str, Any]]]:
        """A cell's rows as its run returned them, `{kind: [row, ...]}` (no config columns added)."""
        out: dict[str, list[dict[str, Any]]] = {}
        for kind, data in self._db.execute("SELECT kind, data FROM rows WHERE cell = ? ORDER BY id", (key,)):
            out.setdefault(kind, []).append(json.loads(data))
        return out

    def rows(self, kind: str = "episode", keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The tidy rows of `kind` of every done cell (or of `keys`), each with its cell's config columns
        and key (`cell`); a row's own fields of those names are kept as `row_<name>`."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
        query = ("SELECT r.cell, c.config, r.data FROM rows r JOIN cells c ON c.key = r.cell "
                 "WHERE r.kind = ? AND c.status = 'done'")
        args: list = [kind]
        if keys is not None:
            keys = list(keys)
            query += f" AND r.cell IN ({','.join('?' * len(keys))})"
            args += keys
        out = []
        configs: dict[str, dict] = {}
        for cell, config, data in self._db.execute(query + " ORDER BY r.id", args):
            if cell not in configs:
                parsed = json.loads(config)
                configs[cell] = {c: parsed[c] for c in ROW_CONFIG_COLUMNS if c in parsed}
            row = json.loads(data)
            own = {(f"row_{k}" if k in configs[cell] or k == "cell" else k): v for k, v in row.items()}
            out.append({**own, **configs[cell], "cell": cell})
        return out

    def frame(self, kind: str = "episode"):
        """`rows(kind)` as a pandas DataFrame."""
        import pandas as pd

        return pd.DataFrame(self.rows(kind))
