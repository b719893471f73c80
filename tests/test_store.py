"""The results store: round trip to tidy rows, content-hash keys, one transaction per cell."""

import json
import os
import sqlite3
from pathlib import Path

import pytest

from qdrift import run_locks, stats
from qdrift.store import SCHEMA_VERSION, Store, cell_key

CONFIG = {"model": "organism", "config": "w8-a16-kv:16", "spec": "w8-a16-kv:16", "spec_hash": "abc",
          "kind": "agent", "task": "pointer_chase", "horizon": 2, "seeds": [1_000_000, 1_000_001], "knobs": {},
          "qdrift_version": "0.1.0"}


def episode(seed, success, config="w8-a16-kv:16"):
    return {"episode": seed, "env": "pointer_chase", "horizon": 2, "seed": seed, "trial": 0, "success": success,
            "steps": 3, "first_error_step": None if success else 1, "stop_reason": "done"}


def test_round_trip_returns_tidy_rows_with_config_columns_that_stats_takes(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        for spec, ok in (("baseline", True), ("w8-a16-kv:16", False)):
            config = {**CONFIG, "config": spec, "spec": spec}
            store.record_done(cell_key(config), config,
                              {"episode": [episode(s, ok) for s in (1_000_000, 1_000_001)],
                               "step": [{"step": 0, "correct": ok}]}, started=1.0, finished=2.5)
        rows = store.rows("episode")
        assert len(rows) == 4 and len(store.rows("step")) == 2
        assert {r["config"] for r in rows} == {"baseline", "w8-a16-kv:16"}
        assert rows[0]["model"] == "organism" and rows[0]["task"] == "pointer_chase" and "cell" in rows[0]
        assert rows[0]["first_error_step"] is None and rows[0]["seed"] == 1_000_000
        result = stats.success_by_horizon(rows, "config")
        assert result.row(config="baseline", horizon=2)["rate"] == 1.0
        assert list(store.frame("episode")["config"]) == [r["config"] for r in rows]
        cell = store.cells()[0]
        assert cell["status"] == "done" and cell["wall_s"] == 1.5 and cell["rows"] == 3 and cell["config"]["horizon"] == 2
        assert store.schema_version == SCHEMA_VERSION


def test_store_uses_wal_and_refuses_another_schema_version(tmp_path):
    path = tmp_path / "r.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute("UPDATE meta SET value = '99' WHERE name = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(ValueError, match="schema_version 99"):
        Store(path)


# The schema of version 1 stores, as that version wrote it: a CHECK that knows no 'drift' rows.
V1_SCHEMA = """
CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE cells (key TEXT PRIMARY KEY, config TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('done', 'failed')), error TEXT, attempts INTEGER NOT NULL DEFAULT 1,
    started REAL, finished REAL, wall_s REAL, created REAL NOT NULL);
CREATE TABLE rows (id INTEGER PRIMARY KEY, cell TEXT NOT NULL REFERENCES cells(key) ON DELETE CASCADE,
    kind TEXT NOT NULL CHECK (kind IN ('episode', 'step', 'item')), data TEXT NOT NULL);
CREATE INDEX rows_by_cell ON rows (cell, kind);
INSERT INTO meta VALUES ('schema_version', '1');
"""


def test_a_version_1_store_is_migrated_with_every_row_and_then_takes_drift_rows(tmp_path):
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)  # a store as version 1 wrote it, with a done cell and its rows
    db.executescript(V1_SCHEMA)
    db.execute("INSERT INTO cells (key, config, status, created) VALUES ('k1', ?, 'done', 0)", (json.dumps(CONFIG),))
    db.executemany("INSERT INTO rows (cell, kind, data) VALUES ('k1', ?, ?)",
                   [("episode", json.dumps(episode(1_000_000, True))), ("step", json.dumps({"step": 0, "correct": True}))])
    with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        db.execute("INSERT INTO rows (cell, kind, data) VALUES ('k1', 'drift', '{}')")
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 2
        assert [r["seed"] for r in store.rows("episode")] == [1_000_000] and len(store.rows("step")) == 1
        config = {**CONFIG, "horizon": 3}
        store.record_done(cell_key(config), config, {"drift": [{"episode": 0, "step": 0, "kl": 0.5}]}, 1.0, 2.0)
        assert [r["kl"] for r in store.rows("drift")] == [0.5]
    with Store(path) as again:  # opening a migrated store changes nothing
        assert again.schema_version == 2 and len(again.rows("episode")) == 1


def test_failed_cell_keeps_its_error_and_no_rows_and_a_later_success_replaces_it(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        key = cell_key(CONFIG)
        store.record_failed(key, CONFIG, "RuntimeError: boom", 1.0, 2.0)
        assert store.status(key) == "failed" and store.rows("episode") == []
        assert store.cells("failed")[0]["error"] == "RuntimeError: boom"
        store.record_done(key, CONFIG, {"episode": [episode(1_000_000, True)]}, 3.0, 4.0)
        (cell,) = store.cells()
        assert cell["status"] == "done" and cell["error"] is None and cell["attempts"] == 2
        assert len(store.rows("episode")) == 1


def test_a_write_that_fails_midway_leaves_neither_rows_nor_a_done_cell(tmp_path):
    class Unserialisable:
        def __str__(self):
            raise RuntimeError("cannot serialise")

    with Store(tmp_path / "r.sqlite") as store:
        key = cell_key(CONFIG)
        bad = {"episode": [episode(1_000_000, True), {"x": Unserialisable()}]}
        with pytest.raises(RuntimeError):  # fails after the cell and the first row were written
            store.record_done(key, CONFIG, bad, 1.0, 2.0)
        assert store.status(key) is None and store.cells() == []
        store.record_failed(key, CONFIG, "RuntimeError: earlier", 1.0, 2.0)
        with pytest.raises(RuntimeError):
            store.record_done(key, CONFIG, bad, 3.0, 4.0)
        assert store.status(key) == "failed" and store.rows("episode") == []
        assert store._db.execute("SELECT COUNT(*) FROM rows").fetchone()[0] == 0
        with pytest.raises(ValueError, match="row kind 'episodes'"):
            store.record_done(key, CONFIG, {"episodes": []}, 1.0, 2.0)


@pytest.mark.parametrize("field, value", [("spec", "w4g128-a16-kv:16"), ("horizon", 3), ("seeds", [1_000_000]),
                                          ("qdrift_version", "0.2.0"), ("knobs", {"distractors": 5}),
                                          ("model", "tiny:llama"), ("task", "ledger")])
def test_cell_key_changes_with_any_config_field(field, value):
    assert cell_key({**CONFIG, field: value}) != cell_key(CONFIG)


def test_cell_key_is_stable_under_key_order_and_copies():
    assert cell_key(dict(reversed(list(CONFIG.items())))) == cell_key(dict(CONFIG)) == cell_key(CONFIG)
    assert len(cell_key(CONFIG)) == 16


def test_a_failed_attempt_never_deletes_a_cell_another_run_finished(tmp_path):
    with Store(tmp_path / "r.sqlite") as a, Store(tmp_path / "r.sqlite") as b:
        key = cell_key(CONFIG)
        a.record_done(key, CONFIG, {"episode": [episode(1_000_000, True)]}, 1.0, 2.0)
        assert b.record_failed(key, CONFIG, "RuntimeError: out of memory", 1.5, 3.0) is False
        (cell,) = a.cells()
        assert cell["status"] == "done" and cell["error"] is None and len(a.rows("episode")) == 1


def test_numpy_values_are_stored_as_numbers_and_booleans_not_their_text(tmp_path):
    import numpy as np

    with Store(tmp_path / "r.sqlite") as store:
        row = {**episode(1_000_000, True), "success": np.bool_(False), "steps": np.int64(3),
               "first_error_step": np.int64(1), "kl": np.float32(0.5), "hist": np.arange(2)}
        store.record_done(cell_key(CONFIG), CONFIG, {"episode": [row]}, 1.0, 2.0)
        (back,) = store.rows("episode")
    assert back["success"] is False and back["steps"] == 3 and back["kl"] == 0.5 and back["hist"] == [0, 1]


def test_a_file_that_is_no_store_or_a_folder_is_named_not_a_traceback(tmp_path, capsys):
    from qdrift.cli import main

    other = tmp_path / "notes.sqlite"
    other.write_text("not a database")
    with pytest.raises(ValueError, match="notes.sqlite is not a store qdrift can open.*name a new file"):
        Store(other)
    with pytest.raises(ValueError, match="is a folder"):
        Store(tmp_path)
    with pytest.raises(SystemExit, match="qdrift: store .*notes.sqlite is not a store"):
        main(["sweep", "status", "default", "--store", str(other)])


def _open_and_write(path, barrier, i):
    barrier.wait()
    with Store(path) as store:
        store.record_done(f"k{i}", {"i": i}, {"episode": [{"x": i}]}, 0, 1)


def test_processes_opening_a_new_store_together_all_write_their_cells(tmp_path):
    # Switching a new file to WAL answered "database is locked" at once (no busy timeout) to processes
    # opening it side by side: one in about five such races lost its cell (a race: against the old code
    # these 20 trials failed in two of three runs).
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        path = tmp_path / f"{trial}.sqlite"
        barrier = ctx.Barrier(6)
        procs = [ctx.Process(target=_open_and_write, args=(path, barrier, i)) for i in range(6)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        assert [p.exitcode for p in procs] == [0] * 6
        with Store(path) as store:
            assert len(store.cells()) == 6


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_a_cell_another_live_run_claimed_is_held_until_recorded_and_free_once_that_run_ends(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as a, Store(path) as b:
        with a.running():
            assert a.claim("k1") == "ours" and a.claim("k2") == "ours"
            with b.running():
                assert b.claim("k1") == "held" and b.holders(["k1", "nope"]) == [os.getpid()]
                assert b.interrupted() == set()  # being run, not interrupted
                a.record_done("k1", {"n": 1}, {"episode": [episode(1, True)]}, 0.0, 1.0)
                assert b.claim("k1") == "done"
        # a's run ended without recording k2 (as a killed run would): another run takes it over
        with b.running():
            assert b.interrupted() == {"k2"} and b.holders(["k2"]) == []
            assert b.claim("k2") == "ours" and b.claim("k2") == "ours"  # a run's own claim stays its own


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_a_store_reached_through_a_symlink_shares_its_locks(tmp_path):
    (tmp_path / "elsewhere").symlink_to(tmp_path)
    with Store(tmp_path / "r.sqlite") as a, Store(tmp_path / "elsewhere" / "r.sqlite") as b:
        with a.running(), b.running():
            assert a.claim("k") == "ours" and b.claim("k") == "held"


def test_a_cell_recorded_failed_since_a_run_saw_it_is_not_retried_by_it(tmp_path):
    with Store(tmp_path / "r.sqlite") as store, store.running():
        store.record_failed("k", {"n": 1}, "RuntimeError: boom", 10.0, 11.0)
        assert store.claim("k", seen_attempts=1) == "ours"  # failed before this run saw it: retried
        store.record_failed("k", {"n": 1}, "RuntimeError: boom", 5.0, 6.0)  # recorded late, an earlier time
        assert store.claim("k", seen_attempts=1) == "failed" and store.cell("k")["error"] == "RuntimeError: boom"


def test_a_pending_log_is_taken_by_one_run_at_a_time_and_kept_until_logged(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as a, Store(path) as b, a.running(), b.running():
        a.record_done("k", {"n": 1}, {}, 0.0, 1.0, sink="wandb:e/p")
        assert a.pending_logs("wandb:e/p") == {"k"} and a.pending_logs("wandb:e/other") == set()
        assert not b.take_pending_log("k", "wandb:e/p")  # a is delivering it
        a.settle_log("k", "wandb:e/p", logged=False)  # a's sink failed: free for the next run
        assert b.take_pending_log("k", "wandb:e/p") and not a.take_pending_log("k", "wandb:e/p")
        b.settle_log("k", "wandb:e/p", logged=True)
        assert b.pending_logs("wandb:e/p") == set() and not b.take_pending_log("k", "wandb:e/p")


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_a_pending_log_another_run_has_since_taken_is_left_to_that_run(tmp_path):
    path = tmp_path / "r.sqlite"
    with Store(path) as a, Store(path) as b, a.running(), b.running():
        a.record_failed("k", {"n": 1}, "RuntimeError: boom", 0.0, 1.0, sink="wandb:e/p")  # a logs the failure...
        b.record_done("k", {"n": 1}, {}, 2.0, 3.0, sink="wandb:e/p")  # ...while b re-runs the cell
        a.settle_log("k", "wandb:e/p", logged=True)
        assert a.pending_logs("wandb:e/p") == {"k"} and not a.take_pending_log("k", "wandb:e/p")  # b's to log
        a.settle_log("k", "wandb:e/p", logged=False)
        assert not a.take_pending_log("k", "wandb:e/p")


def _done(store, key="k1", code=None, finished=1.0):
    store.record_done(key, {"model": "m"}, {"episode": [episode(0, True)]}, 0.0, finished, code=code)


def test_each_cell_keeps_its_code_and_a_store_holding_other_codes_is_refused_naming_them(tmp_path):
    from qdrift.store import UNRECORDED_CODE, CodeChanged

    a, b = "a" * 64, "b" * 64
    with Store(tmp_path / "s.sqlite") as store:
        assert store.code_fingerprints() == []
        store.check_code(a)  # nothing stored: any code may start
        store.record_failed("f", {"model": "m"}, "boom", 0.0, 1.0)  # a failed cell is no result, credits no code
        assert store.cell("f")["code"] is None
        store.check_code(a)
        _done(store, "k1", code=a, finished=2.0)
        store.check_code(a)  # the same code resumes
        with pytest.raises(CodeChanged, match=f"code sha256 {'a' * 16}.*is sha256 {'b' * 16}.*--allow-code-change"):
            store.check_code(b)
        store.check_code(b, allow_change=True)  # allowed: the check writes nothing
        assert store.code_fingerprints() == [a]
        _done(store, "k2", code=b, finished=3.0)
        assert store.code_fingerprints() == [a, b]  # in the order each first finished a cell
        assert {c["key"]: c["code"] for c in store.cells("done")} == {"k1": a, "k2": b}
        with pytest.raises(CodeChanged, match=f"by qdrift code sha256 {'b' * 16}"):
            store.check_code(a)  # the first code is now refused too: the store mixes
        _done(store, "k0", code=None, finished=1.0)  # as a qdrift that recorded no code wrote it
        assert store.code_fingerprints() == [UNRECORDED_CODE, a, b]


def test_a_cell_of_other_code_than_the_stores_other_results_is_refused_at_record_time_when_asked(tmp_path):
    from qdrift.store import CodeChanged

    a, b = "a" * 64, "b" * 64
    with Store(tmp_path / "s.sqlite") as store:
        store.record_done("k1", {"model": "m"}, {"episode": [episode(0, True)]}, 0.0, 1.0, code=a,
                          allow_other_code=False)  # the first result: nothing to differ from
        store.record_done("k1", {"model": "m"}, {"episode": [episode(0, True)]}, 0.0, 1.0, code=b,
                          allow_other_code=False)  # its own earlier record is not another cell's
        with pytest.raises(CodeChanged, match=f"cell k2 was measured by qdrift code sha256 {'a' * 16}.*"
                                              f"results measured by qdrift code sha256 {'b' * 16}"):
            store.record_done("k2", {"model": "m"}, {"episode": [episode(1, True)]}, 0.0, 1.0, code=a,
                              allow_other_code=False)
        assert store.status("k2") is None and len(store.rows("episode")) == 1  # nothing written
        with pytest.raises(CodeChanged, match="a qdrift that did not record its code"):
            store.record_done("k2", {"model": "m"}, {"episode": []}, 0.0, 1.0, code=None, allow_other_code=False)
        store.record_done("k2", {"model": "m"}, {"episode": []}, 0.0, 2.0, code=a)  # allowed by default
        assert store.code_fingerprints() == [b, a]


def test_a_store_from_before_cells_recorded_their_code_gains_the_column_and_is_not_guessed(tmp_path):
    import sqlite3

    from qdrift.store import UNRECORDED_CODE, CodeChanged

    path = tmp_path / "old.sqlite"
    with Store(path) as store:
        _done(store)
    with sqlite3.connect(path) as db:  # the cells table as qdrift wrote it before the code column
        db.execute("ALTER TABLE cells DROP COLUMN code")
        assert "code" not in {col[1] for col in db.execute("PRAGMA table_info(cells)")}
    before = path.read_bytes()
    with Store(path) as store:  # read only: the file stays as it was (a card hashes it)
        assert store.code_fingerprints() == [UNRECORDED_CODE] and store.rows("episode")[0]["success"] is True
        assert store.cells()[0]["code"] is None
        with pytest.raises(CodeChanged, match="by a qdrift that did not record its code"):
            store.check_code("c" * 64)
    assert path.read_bytes() == before
    with Store(path) as reader, Store(path) as store, Store(path) as other:  # the first write adds the column
        assert reader.code_fingerprints() == [UNRECORDED_CODE]
        store.record_done("k2", {"model": "m"}, {"episode": []}, 0.0, 2.0, code="c" * 64)
        other.record_done("k3", {"model": "m"}, {"episode": []}, 0.0, 3.0, code="c" * 64)  # added already: once
        # a store opened before the column came sees the codes written since
        assert reader.code_fingerprints() == other.code_fingerprints() == [UNRECORDED_CODE, "c" * 64]
        assert {c["key"]: c["code"] for c in reader.cells()} == {"k1": None, "k2": "c" * 64, "k3": "c" * 64}


def test_a_result_measured_on_weights_another_run_re_pinned_meanwhile_is_refused(tmp_path):
    from qdrift.store import WeightsChanged

    x, y = "1" * 64, "2" * 64
    with Store(tmp_path / "s.sqlite") as a, Store(tmp_path / "s.sqlite") as b:
        a.check_model("m", x)  # run A starts...
        b.check_model("m", y)  # ...run B, other weights under the same name, before A recorded anything
        with pytest.raises(WeightsChanged, match=f"weights sha256 {'1' * 16}.*now pins weights sha256 {'2' * 16}"):
            a.record_done("k1", {"model": "m"}, {"episode": [episode(0, True)]}, 0.0, 1.0, weights=("m", x))
        assert a.status("k1") is None
        b.record_done("k2", {"model": "m"}, {"episode": [episode(1, True)]}, 0.0, 1.0, weights=("m", y))
        assert a.model_fingerprints() == {"m": y} and [r["seed"] for r in a.rows("episode")] == [1]


def test_a_result_recorded_with_its_weights_pins_them_when_no_run_has(tmp_path):
    from qdrift.store import WeightsChanged

    with Store(tmp_path / "s.sqlite") as store:
        store.record_done("k1", {"model": "m"}, {"episode": []}, 0.0, 1.0, weights=("m", "1" * 64))
        assert store.model_fingerprints() == {"m": "1" * 64}
        with pytest.raises(WeightsChanged):
            store.record_done("k2", {"model": "m"}, {"episode": []}, 0.0, 1.0, weights=("m", "2" * 64))


def test_a_store_that_cannot_be_written_is_read_read_only_and_a_write_says_read_only(tmp_path, monkeypatch):
    # A store on a read-only filesystem (or another user's): WAL mode would need to write, so it opened as
    # "not a store" and could not even be reported. Root is let write anywhere here, so the check is faked.
    import qdrift.store as store_module
    from qdrift.store import ReadOnlyStore

    path = tmp_path / "s.sqlite"
    with Store(path) as s:
        s.record_done("k1", {"model": "m", "spec": "baseline"}, {"episode": [{"seed": 1}]}, 1.0, 2.0)
    assert not Path(f"{path}-shm").exists()  # closed cleanly: no WAL index left, so it is opened immutable
    monkeypatch.setattr(store_module.os, "access", lambda p, mode: mode != os.W_OK)
    with Store(path) as s:
        assert s.read_only and s.status("k1") == "done" and s.rows("episode")[0]["seed"] == 1
        assert s.interrupted() == set()
        with pytest.raises(ReadOnlyStore, match=f"store {path} is read-only"):
            s.record_done("k2", {"model": "m"}, {}, 1.0, 2.0)
    assert Store(path, read_only=True).status("k1") == "done"


def test_a_cells_identifying_columns_win_over_a_rows_own_fields(tmp_path):
    # lm-eval item rows name the spec their harness ran (w16-a16-kv:16 for the baseline): the baseline
    # cell's rows must still say "baseline", or reports pair and title it as another spec.
    with Store(tmp_path / "s.sqlite") as s:
        s.record_done("k1", {"model": "m", "config": "baseline", "spec": "baseline", "spec_hash": None,
                             "kind": "short_form", "task": "mmlu_local"},
                      {"item": [{"item": "a/x/0", "correct": True, "spec": "w16-a16-kv:16", "spec_hash": "ab",
                                 "task": "mmlu_local_anatomy", "cell": "theirs"}]}, 1.0, 2.0)
        (row,) = s.rows("item")
    assert (row["spec"], row["config"], row["spec_hash"], row["task"], row["cell"]) == (
        "baseline", "baseline", None, "mmlu_local", "k1")
    assert (row["row_spec"], row["row_spec_hash"], row["row_task"], row["row_cell"]) == (
        "w16-a16-kv:16", "ab", "mmlu_local_anatomy", "theirs")


def _damaged_store(path):
    """A store of 20 done cells whose middle page is overwritten, as a disk or a copy can damage one."""
    with Store(path) as store:
        for i in range(20):
            store.record_done(f"k{i}", {"i": i}, {"episode": [{"x": j, "pad": "y" * 200} for j in range(50)]}, 0, 1)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.seek(size // 2 // 4096 * 4096)
        f.write(bytes(range(256)) * 16)


def test_a_damaged_store_is_refused_before_a_run_and_before_a_report(tmp_path, capsys):
    from qdrift.cli import main
    from qdrift.store import StoreDamaged
    from qdrift.sweep import parse_sweep, run_sweep

    path = tmp_path / "r.sqlite"
    _damaged_store(path)
    store = Store(path)
    assert store.status("k3") == "done"  # what a run used to trust: it skipped cells as already done
    with pytest.raises(StoreDamaged, match="is damaged .*integrity check.*malformed.*recover"):
        store.check_integrity()
    sweep = parse_sweep("models: [tiny:llama]\nspecs: [baseline]\ntasks:\n  - {kind: agent, env: ledger, "
                        "horizons: [1], seeds: 1}\n")
    with pytest.raises(StoreDamaged):
        run_sweep(sweep, store, progress=False)
    store.close()
    with pytest.raises(SystemExit, match="r.sqlite is damaged"):
        main(["sweep", "status", "default", "--store", str(path)])
    assert path.stat().st_size > 0  # the file is kept as it was, for recovery


def test_an_intact_store_passes_the_integrity_check(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        store.record_done("k", {"i": 1}, {"episode": [{"x": 1}]}, 0, 1)
        store.check_integrity()


def test_a_cells_finished_chunks_are_kept_for_its_code_only_and_go_when_it_is_recorded(tmp_path):
    rows = {"episode": [{"seed": 7, "success": True}], "step": [{"seed": 7, "step": 0, "correct": True}]}
    with Store(tmp_path / "s.sqlite") as s:
        assert s.chunk_rows("k1", "7,8", "code-a") is None
        s.save_chunk("k1", "7,8", rows, "code-a")
        s.save_chunk("k2", "7,8", rows, "code-a")
        assert s.chunk_rows("k1", "7,8", "code-a") == rows
        assert s.chunk_rows("k1", "7,8", "code-b") is None  # other code's chunk is never mixed into a cell
        assert s.chunk_rows("k1", "9,10", "code-a") is None and s.chunk_count() == 2
        s.record_failed("k1", {"i": 1}, "boom", 0, 1)
        assert s.chunk_count("k1") == 1  # a failed attempt keeps what finished
        s.record_done("k1", {"i": 1}, rows, 0, 1)
        assert s.chunk_count("k1") == 0 and s.chunk_count("k2") == 1


def test_a_read_only_store_from_before_chunks_and_pending_logs_still_reads(tmp_path, monkeypatch):
    import sqlite3

    import qdrift.store as store_module

    path = tmp_path / "s.sqlite"
    with Store(path) as s:
        s.record_done("k1", {"model": "m"}, {"episode": [{"seed": 1}]}, 1.0, 2.0)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE chunks")
    db.execute("DROP TABLE pending_logs")  # as an older qdrift wrote it
    db.commit()
    db.close()
    monkeypatch.setattr(store_module.os, "access", lambda p, mode: mode != os.W_OK)
    with Store(path) as s:
        assert s.read_only and s.status("k1") == "done"
        assert s.chunk_count() == 0 and s.pending_logs("wandb:e/p") == set()
