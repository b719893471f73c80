"""`qdrift sweep run` and `qdrift sweep status` from the command line."""

import os

import pytest

from qdrift import run_locks
from qdrift.cli import main
from qdrift.store import Store
from qdrift.sweep import parse_sweep, unique_cells

TEXT = """\
name: cli
models: [tiny:llama]
specs: [baseline]
tasks:
  - env: ledger
    horizons: [1]
    seeds: 1
    max_new_tokens: 4
"""


def test_run_then_status_shows_every_cell_done_and_a_rerun_skips_it(tmp_path, capsys):
    sweep, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep.write_text(TEXT)
    assert main(["sweep", "status", str(sweep), "--store", str(store)]) == 0
    assert "cli: 1 cells, 0 done, 0 failed, 1 pending" in capsys.readouterr().out
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet"]) == 0
    assert "1 cells: 0 already done, 1 run now, 0 failed" in capsys.readouterr().out
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet"]) == 0
    assert "1 already done, 0 run now" in capsys.readouterr().out
    main(["sweep", "status", str(sweep), "--store", str(store)])
    text = capsys.readouterr().out
    assert "    done  " in text and "tiny:llama baseline ledger L=1" in text and "1 done, 0 failed, 0 pending" in text


def test_report_prints_the_compare_report_and_writes_it_beside_the_store(tmp_path, capsys):
    sweep, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep.write_text(TEXT.replace("specs: [baseline]", "specs: [baseline, w8-a16-kv:16]"))
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet", "--report"]) == 0
    out = capsys.readouterr().out
    written = (tmp_path / "s.md").read_text()
    assert written.strip() and written.strip() in out
    assert "w8-a16-kv:16" in written and "ledger" in written
    # Another sweep into the same store: its report holds its own cells only.
    sweep.write_text(TEXT.replace("seeds: 1", "seeds: [1000005]"))
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet", "--report"]) == 0
    written = (tmp_path / "s.md").read_text()
    assert "1 done cells" in written and "w8-a16-kv:16" not in written


def test_run_refuses_a_bad_file_before_any_cell_with_the_line(tmp_path):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(TEXT.replace("specs: [baseline]", "specs: [baseline, w3x]"))
    with pytest.raises(SystemExit, match=r"s.yaml:3: specs: bad spec 'w3x'"):
        main(["sweep", "run", str(sweep), "--store", str(tmp_path / "s.sqlite")])
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize("args, message", [
    (["--executor", "local", "--workers", "2"], "--ray-address and --workers need the ray executor"),
    (["--executor", "local", "--ray-address", "auto"], "--ray-address and --workers need the ray executor"),
])
def test_run_refuses_ray_options_with_the_local_executor(tmp_path, args, message):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(TEXT)
    with pytest.raises(SystemExit, match=message):
        main(["sweep", "run", str(sweep), "--store", str(tmp_path / "s.sqlite"), *args])
    assert not (tmp_path / "s.sqlite").exists()


def test_workers_must_be_a_positive_integer(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "run", "default", "--workers", "0"])
    assert "--workers: must be an integer >= 1, got '0'" in capsys.readouterr().err


def test_a_run_whose_result_sink_failed_exits_nonzero_with_every_cell_stored(tmp_path, monkeypatch, capsys):
    import qdrift.cli_sweep as cli_sweep

    class BrokenSink:
        runs = 0

        def __call__(self, result):
            raise ConnectionError("wandb.init timed out")

    monkeypatch.setattr(cli_sweep, "_sink", lambda *args: BrokenSink())
    sweep, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep.write_text(TEXT)
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "1 run now, 0 failed" in out and "the result sink failed and was stopped" in out


def test_a_model_folder_without_weights_is_named_not_a_traceback(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    sweep = tmp_path / "s.yaml"
    sweep.write_text(TEXT.replace("tiny:llama", str(folder)))
    with pytest.raises(SystemExit, match="qdrift sweep: model .* no weight file"):
        main(["sweep", "run", str(sweep), "--store", str(tmp_path / "s.sqlite"), "--quiet"])


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_status_shows_the_cells_another_run_is_running_and_the_ones_a_run_left_unrecorded(tmp_path, capsys):
    sweep, path = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep.write_text(TEXT.replace("horizons: [1]", "horizons: [1, 2]"))
    first, second = unique_cells(parse_sweep(sweep.read_text()))
    with Store(path) as store:
        with store.running():
            store.claim(first.key)
            main(["sweep", "status", str(sweep), "--store", str(path)])
            text = capsys.readouterr().out
            assert f" running  {first.key}  {first.label}  by the run of pid {os.getpid()}" in text
            assert "2 cells, 0 done, 0 failed, 1 running, 1 pending" in text
    main(["sweep", "status", str(sweep), "--store", str(path)])  # that run ended without recording it
    text = capsys.readouterr().out
    assert f" pending  {first.key}  {first.label}  interrupted: a run started it and never recorded it" in text
    assert f" pending  {second.key}  {second.label}\n" in text and "0 failed, 2 pending" in text


def test_a_store_measured_by_other_code_is_refused_until_allowed_and_status_names_the_codes(tmp_path, capsys):
    import sqlite3

    from qdrift.code_fingerprint import running_code

    sweep, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep.write_text(TEXT)
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet"]) == 0
    main(["sweep", "status", str(sweep), "--store", str(store)])
    mine = f"this qdrift's code (sha256 {running_code()[:16]}...)"
    assert f"code of the store's done cells: 1 by {mine}" in capsys.readouterr().out
    with sqlite3.connect(store) as db:  # as if another qdrift had measured the stored cell
        db.execute("UPDATE cells SET code = ?", ("e" * 64,))
    with pytest.raises(SystemExit, match="measured by qdrift code sha256 eeeeeeeeeeeeeeee.*--allow-code-change"):
        main(["sweep", "run", str(sweep), "--store", str(store), "--quiet"])
    main(["sweep", "status", str(sweep), "--store", str(store)])
    assert f"1 by sha256 eeeeeeeeeeeeeeee... (this qdrift's code is sha256 {running_code()[:16]}" in capsys.readouterr().out
    # Allowed, a run that measures nothing changes nothing: the cell stays the other code's.
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet", "--allow-code-change"]) == 0
    sweep.write_text(TEXT.replace("horizons: [1]", "horizons: [1, 2]"))
    assert main(["sweep", "run", str(sweep), "--store", str(store), "--quiet", "--allow-code-change"]) == 0
    capsys.readouterr()
    main(["sweep", "status", str(sweep), "--store", str(store)])
    # each cell keeps the code that measured it (equal counts in the order the cells were recorded)
    assert f"code of the store's done cells: 1 by sha256 eeeeeeeeeeeeeeee...; 1 by {mine}" in capsys.readouterr().out


def test_without_store_results_go_to_the_output_folder_not_the_current_one(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "s.yaml"
    sweep.write_text(TEXT)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("QDRIFT_OUT", raising=False)
    assert main(["sweep", "run", str(sweep), "--quiet"]) == 0
    assert [p.name for p in work.iterdir()] == ["qdrift-out"] and (work / "qdrift-out" / "cli.sqlite").is_file()
    monkeypatch.setenv("QDRIFT_OUT", str(tmp_path / "elsewhere"))
    capsys.readouterr()
    assert main(["sweep", "status", str(sweep)]) == 0
    assert f"1 pending (store: {tmp_path / 'elsewhere' / 'cli.sqlite'})" in capsys.readouterr().out
