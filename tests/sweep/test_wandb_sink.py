"""The W&B sink: a tiny sweep logged offline, checked in the run folders wandb writes; the mode choice."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")  # the [dev] extra installs it, so CI runs these tests

from wandb.proto import wandb_internal_pb2  # noqa: E402

from qdrift.code_fingerprint import running_code  # noqa: E402
from qdrift.store import Store  # noqa: E402
from qdrift.sweep import parse_sweep, run_sweep, shortform, unique_cells  # noqa: E402
from qdrift.sweep.wandb_sink import WandbSink, api_key_source, choose_mode  # noqa: E402

SECRET = "qdrift-test-key-0123456789abcdef0123456789abcdef0123"

TEXT = """\
name: wbtest
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: ledger
    horizons: [2]
    seeds: 2
    max_new_tokens: 4
  - kind: short_form
    runner: fake_items
    task: parity
"""


def keep_offline(tmp_path: Path, monkeypatch) -> None:
    """Keep wandb off the network and out of the home directory; an API key in the environment
    that must never reach a file (the sink is told to run offline)."""
    for var in ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_SWEEP_ID", "WANDB_RUN_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_API_KEY", SECRET)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    for var, sub in (("WANDB_DIR", "wandb-default"), ("WANDB_CONFIG_DIR", "wandb-config"),
                     ("WANDB_CACHE_DIR", "wandb-cache"), ("WANDB_DATA_DIR", "wandb-data"),
                     ("WANDB_ARTIFACT_DIR", "wandb-artifacts")):
        monkeypatch.setenv(var, str(tmp_path / sub))


@pytest.fixture
def offline_env(tmp_path, monkeypatch):
    keep_offline(tmp_path, monkeypatch)


def fake_items(model, tokenizer, task):
    """Items whose outcome depends on whether the model is quantized: 6 of 8 right unquantized,
    the variant loses items 0 and 1 and gains item 7 (so it is 5 of 8, diff -1/8, 3 flips)."""
    from qdrift.quant import spec_of

    right = {2, 3, 4, 5, 7} if spec_of(model) is not None else {0, 1, 2, 3, 4, 5}
    return [{"item": f"parity/{i}", "correct": i in right, "gold_logprob": -0.5 * i} for i in range(8)]


def records(path: Path):
    """The protobuf records of a `.wandb` transaction log.

    By hand because wandb 0.31 moved its reader into the Go core and ships no Python one. The
    format is the LevelDB log format wandb has always used: a 7-byte header (':W&B', magic, version),
    then 32 KiB blocks of chunks, each `<crc32 u32><length u16><type u8>` and its bytes; types
    1 = whole record, 2/3/4 = first/middle/last piece.
    """
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, block, pending = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # the block's tail is zero padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0:
            pos += left - 7
            continue
        pending += data[pos:pos + length]
        pos += length
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def read_run(folder: Path) -> dict:
    """A run's config, final summary and exit code from its transaction log.

    wandb's service writes the log asynchronously; `teardown` waits for it to finish writing.
    """
    import wandb

    wandb.teardown()
    (log,) = folder.glob("run-*.wandb")
    config, summary, exit_code, group, name, logged = {}, {}, None, None, None, set()
    for r in records(log):
        which = r.WhichOneof("record_type")
        if which == "run":
            config.update({u.key: json.loads(u.value_json) for u in r.run.config.update})
            group, name = r.run.run_group, r.run.display_name
        elif which == "config":
            config.update({u.key: json.loads(u.value_json) for u in r.config.update})
        elif which == "summary":
            for u in r.summary.update:  # media values arrive as nested keys (table -> path, ...)
                summary[u.key or "/".join(u.nested_key)] = json.loads(u.value_json)
                logged.add(u.key or u.nested_key[0])
        elif which == "exit":
            exit_code = r.exit.exit_code
    return {"config": config, "summary": summary, "logged": logged, "exit_code": exit_code, "group": group,
            "name": name}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """The tiny sweep (2 specs x (an agent task + a short-form task)) run once, logged offline."""
    from qdrift.sweep.file import WandbOptions

    tmp_path = tmp_path_factory.mktemp("logged")
    shortform.register("fake_items", fake_items)
    with pytest.MonkeyPatch.context() as monkeypatch:
        keep_offline(tmp_path, monkeypatch)
        try:
            sweep = parse_sweep(TEXT)
            messages = []
            with Store(tmp_path / "r.sqlite") as store:
                sink = WandbSink(WandbOptions(project="qdrift-test", mode="offline"), sweep.name, store,
                                 default_dir=tmp_path, announce=messages.append)
                outcome = run_sweep(sweep, store, progress=False, on_result=sink)
                cells = unique_cells(sweep)
        finally:
            shortform.unregister("fake_items")
    return tmp_path, outcome, cells, sink, messages


def runs_by_key(tmp_path: Path) -> dict[str, dict]:
    out = {}
    for folder in sorted((tmp_path / "wandb").glob("offline-run-*")):
        run = read_run(folder)
        run["folder"] = folder
        out[run["config"]["cell_key"]] = run
    return out


def test_every_cell_becomes_one_offline_run_with_its_config_metrics_tables_and_plots(logged):
    tmp_path, outcome, cells, sink, messages = logged
    assert outcome.done == 4 and not outcome.failed
    print(f"sink: {sink.seconds / sink.runs:.2f} s per cell")
    assert messages == [f"wandb: offline mode (asked for); runs under {tmp_path.resolve() / 'wandb'}"]
    runs = runs_by_key(tmp_path)
    assert set(runs) == {c.key for c in cells} and sink.runs == 4
    for cell in cells:
        run = runs[cell.key]
        assert run["exit_code"] == 0 and run["group"] == "wbtest" and run["name"] == cell.label
        config = run["config"]
        assert {k: config[k] for k in cell.config()} == json.loads(json.dumps(cell.config()))
        assert config["spec"] == cell.spec and config["sweep"] == "wbtest"
        assert config["qdrift_code"] == running_code()  # which code measured it, as the store records
        media = run["folder"] / "files" / "media"
        if cell.spec == "baseline":
            assert config["spec_fields"] is None and "paired/diff" not in run["summary"]
        else:
            assert config["spec_fields"]["decode"]["weights"]["bits"] == 8
            assert "paired/diff" in run["summary"] and list((media / "images").glob("paired_plot_*.png"))
        if cell.horizon is not None:
            assert run["logged"] >= {"success_rate", "step_accuracy", "first_error_rate", "episodes_table",
                                           "steps_table", "step_accuracy_plot"}
            (table,) = (media / "table").glob("steps_table_*.table.json")
            steps = json.loads(table.read_text())
            with Store(tmp_path / "r.sqlite") as store:
                assert len(steps["data"]) == len(store.rows("step", [cell.key])) > 0
            assert "correct" in steps["columns"]
            assert list((media / "images").glob("step_accuracy_plot_*.png"))
        else:
            (table,) = (media / "table").glob("items_table_*.table.json")
            assert len(json.loads(table.read_text())["data"]) == 8


def test_metrics_match_the_rows_in_the_store(logged):
    tmp_path, _, cells, _, _ = logged
    runs = runs_by_key(tmp_path)
    with Store(tmp_path / "r.sqlite") as store:
        for cell in (c for c in cells if c.horizon is not None):
            eps, steps = store.rows("episode", [cell.key]), store.rows("step", [cell.key])
            s = runs[cell.key]["summary"]
            assert s["success_rate"] == pytest.approx(sum(e["success"] for e in eps) / 2)
            assert s["step_accuracy"] == pytest.approx(sum(r["correct"] for r in steps) / len(steps))
    items = [runs[c.key]["summary"] for c in cells if c.horizon is None]
    base, variant = sorted(items, key=lambda s: "paired/diff" in s)
    assert base["accuracy"] == pytest.approx(6 / 8) and variant["accuracy"] == pytest.approx(5 / 8)
    assert base["gold_logprob_mean"] == pytest.approx(-0.5 * 3.5)
    # paired on the same items: items 0, 1 lost, 7 gained -> difference -1/8, 3 of 8 flipped
    assert variant["paired/diff"] == pytest.approx(-1 / 8) and variant["paired/flip_rate"] == pytest.approx(3 / 8)
    from scipy.stats import binomtest

    assert variant["paired/mcnemar_p"] == pytest.approx(binomtest(1, 3, 0.5).pvalue)


def test_the_api_key_is_in_no_file_written(logged):
    tmp_path, *_ = logged
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), f"API key written to {path}"


def test_a_failed_cell_logs_its_error_and_exits_nonzero(tmp_path, offline_env):
    from qdrift.sweep import Cell, LocalExecutor
    from qdrift.sweep.file import WandbOptions

    def broken(cell: Cell):
        raise RuntimeError(f"no memory for {cell.label}")

    sweep = parse_sweep(TEXT.split("  - kind: short_form")[0].replace("[baseline, w8-a16-kv:16]", "[baseline]"))
    with Store(tmp_path / "r.sqlite") as store:
        sink = WandbSink(WandbOptions(project="p", mode="offline"), sweep.name, store, tmp_path, announce=str)
        outcome = run_sweep(sweep, store, executor=LocalExecutor(broken), progress=False, on_result=sink)
    assert len(outcome.failed) == 1
    (run,) = runs_by_key(tmp_path).values()
    assert run["exit_code"] == 1 and run["summary"]["status"] == "failed"
    assert run["summary"]["error"] == "RuntimeError: no memory for tiny:llama baseline ledger L=2"


def test_mode_is_offline_without_a_key_and_online_with_one(tmp_path):
    none = tmp_path / "absent-netrc"
    assert choose_mode(None, environ={}, netrc_path=none)[0] == "offline"
    assert choose_mode(None, environ={"WANDB_API_KEY": "k" * 40}, netrc_path=none) == \
        ("online", "API key configured in WANDB_API_KEY")
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    mode, why = choose_mode(None, environ={}, netrc_path=netrc)
    assert mode == "online" and "k" * 40 not in why and str(netrc) in why
    other_host = tmp_path / "netrc-other"
    other_host.write_text("machine example.com login u password p\n")
    other_host.chmod(0o600)
    assert api_key_source({}, other_host) is None
    assert choose_mode("online", environ={}, netrc_path=none) == ("online", "asked for")
    assert choose_mode("offline", environ={"WANDB_API_KEY": "k"}, netrc_path=none)[0] == "offline"
    assert choose_mode(None, environ={"WANDB_MODE": "dryrun", "WANDB_API_KEY": "k"}, netrc_path=none)[0] == "offline"
    with pytest.raises(ValueError, match="WANDB_MODE='disabled' cannot log cells"):
        choose_mode(None, environ={"WANDB_MODE": "disabled"}, netrc_path=none)
    with pytest.raises(ValueError, match="must be one of online, offline"):
        choose_mode("sometimes", environ={}, netrc_path=none)


def test_the_sweep_file_wandb_block_is_checked_by_line():
    from qdrift.sweep import SweepError

    agent_only = TEXT.split("  - kind: short_form")[0]
    ok = parse_sweep(agent_only + "wandb:\n  project: p\n  mode: offline\n")
    assert ok.wandb.project == "p" and ok.wandb.mode == "offline"
    with pytest.raises(SweepError) as e:
        parse_sweep(agent_only + "wandb:\n  projet: p\n  mode: sometimes\n")
    text = str(e.value)
    assert "<string>:10: wandb.unknown key 'projet' (did you mean 'project'?)" in text
    assert "<string>:11: wandb.mode: unknown mode 'sometimes'; valid modes: online, offline" in text
    assert "<string>:9: wandb: missing required key 'project'" in text


def test_importing_the_sink_pulls_in_neither_wandb_nor_torch():
    code = "import sys, qdrift.sweep.wandb_sink; print(sorted({m.split('.')[0] for m in sys.modules}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "'wandb'" not in out and "'torch'" not in out


def test_sweep_run_with_wandb_and_no_key_runs_offline_beside_the_store(tmp_path, offline_env, monkeypatch, capsys):
    from qdrift.cli import main

    monkeypatch.delenv("WANDB_API_KEY")
    sweep_file, store = tmp_path / "s.yaml", tmp_path / "out" / "s.sqlite"
    sweep_file.write_text(TEXT.split("  - kind: short_form")[0].replace("[baseline, w8-a16-kv:16]", "[baseline]"))
    assert main(["sweep", "run", str(sweep_file), "--store", str(store), "--quiet", "--wandb", "qdrift-test"]) == 0
    out = capsys.readouterr().out
    assert "wandb: offline mode (no API key configured (WANDB_API_KEY or ~/.netrc)" in out
    assert "wandb: 1 run(s) logged (offline)" in out
    (run,) = runs_by_key(tmp_path / "out").values()
    assert run["config"]["task"] == "ledger" and run["exit_code"] == 0
    with pytest.raises(SystemExit, match="--wandb-mode given but W&B logging is off; add --wandb PROJECT"):
        main(["sweep", "run", str(sweep_file), "--store", str(store), "--wandb-mode", "online"])


def test_under_wandb_agent_sweep_cell_logs_the_cell_and_a_done_cell_from_the_store(tmp_path, offline_env,
                                                                                    monkeypatch, capsys):
    from qdrift.cli import main

    monkeypatch.setenv("WANDB_SWEEP_ID", "qdrifttest")  # what `wandb agent` sets for its runs
    monkeypatch.setenv("WANDB_PROJECT", "qdrift-test")
    monkeypatch.setenv("WANDB_MODE", "offline")
    sweep_file, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep_file.write_text(TEXT.split("  - kind: short_form")[0])
    args = ["sweep", "cell", str(sweep_file), "--store", str(store), "--quiet", "--model=tiny:llama",
            "--spec=baseline", "--task=ledger", "--horizon=2"]
    assert main(args) == 0 and main(args) == 0
    out = capsys.readouterr().out
    assert "wandb: offline mode (WANDB_MODE=offline)" in out and "already done" in out
    first, second = (read_run(f) for f in sorted((tmp_path / "wandb").glob("offline-run-*")))
    assert first["config"]["cell_key"] == second["config"]["cell_key"]
    for key in ("success_rate", "step_accuracy", "episodes", "steps"):
        assert first["summary"][key] == second["summary"][key]


def test_a_calibrated_variant_finds_its_baseline_rows_for_the_paired_metrics(tmp_path, offline_env):
    from qdrift.sweep import expand
    from qdrift.sweep.file import WandbOptions

    text = ("models: [organism]\nspecs: [baseline, w16-a16-kv:fp8e4m3@static]\ntasks:\n  - env: pointer_chase\n"
            "    horizons: [2]\n    seeds: 1\ncalibration: {env: pointer_chase, horizon: 3, samples: 2}\n")
    base, static = expand(parse_sweep(text))
    assert static.calibration is not None and base.calibration is None
    row = {"episode": 0, "env": "pointer_chase", "horizon": 2, "seed": 1_000_000, "trial": 0, "success": True,
           "steps": 3, "first_error_step": None, "stop_reason": "done"}
    with Store(tmp_path / "r.sqlite") as store:
        store.record_done(base.key, base.config(), {"episode": [row]}, 1.0, 2.0)
        sink = WandbSink(WandbOptions(project="p", mode="offline"), "s", store, tmp_path, announce=str)
        assert sink._baseline_rows(static, "episode") == store.rows("episode", keys=[base.key])


def test_a_done_drift_cell_logged_again_keeps_its_drift_metrics(tmp_path, offline_env, monkeypatch, capsys):
    from qdrift.cli import main

    monkeypatch.setenv("WANDB_SWEEP_ID", "qdrifttest")
    monkeypatch.setenv("WANDB_PROJECT", "qdrift-test")
    monkeypatch.setenv("WANDB_MODE", "offline")
    sweep_file, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep_file.write_text(TEXT.split("  - kind: short_form")[0].replace("    seeds: 2\n", "    seeds: 1\n    drift: true\n"))
    args = ["sweep", "cell", str(sweep_file), "--store", str(store), "--quiet", "--model=tiny:llama",
            "--spec=w8-a16-kv:16", "--task=ledger", "--horizon=2"]
    assert main(args) == 0 and main(args) == 0
    first, second = (read_run(f) for f in sorted((tmp_path / "wandb").glob("offline-run-*")))
    drift = {k: v for k, v in first["summary"].items() if k.startswith("drift/")}
    assert drift and all(second["summary"][k] == v for k, v in drift.items())


def test_cells_missed_by_a_failed_wandb_sink_are_logged_by_the_next_sweep_run(tmp_path, offline_env, monkeypatch,
                                                                               capsys):
    import wandb

    from qdrift.cli import main

    sweep_file, store = tmp_path / "s.yaml", tmp_path / "s.sqlite"
    sweep_file.write_text(TEXT.split("  - kind: short_form")[0])
    args = ["sweep", "run", str(sweep_file), "--store", str(store), "--quiet", "--wandb", "qdrift-test", "--wandb-mode",
            "offline"]
    real_init, calls = wandb.init, []

    def failing_after_one(*a, **kw):
        calls.append(kw["config"]["cell_key"])
        if len(calls) > 1:
            raise wandb.errors.CommError("network is unreachable")
        return real_init(*a, **kw)

    monkeypatch.setattr(wandb, "init", failing_after_one)
    assert main(args) == 1  # every cell stored, not every cell logged
    out = capsys.readouterr().out
    cells = {c.key for c in unique_cells(parse_sweep(sweep_file.read_text()))}
    assert f"{len(cells) - 1} cell(s) not logged: the next run with the same sink logs them" in out
    assert set(runs_by_key(tmp_path)) == {calls[0]}

    monkeypatch.setattr(wandb, "init", real_init)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"{len(cells)} already done, 0 run now, 0 failed" in out
    assert f"{len(cells) - 1} done cell(s) an earlier run's result sink had missed were logged now" in out
    runs = runs_by_key(tmp_path)
    assert set(runs) == cells and len(list((tmp_path / "wandb").glob("offline-run-*"))) == len(cells)  # none twice
    assert all(r["exit_code"] == 0 and r["summary"]["episodes"] == 2 for r in runs.values())
    assert main(args) == 0 and "were logged now" not in capsys.readouterr().out


def test_a_stochastic_rounding_variant_is_logged_with_its_paired_comparison(tmp_path, offline_env):
    # A ~sr cell is keyed by its batch, its baseline cell is not: looked up with the batch, no baseline was found.
    from qdrift.sweep.file import WandbOptions

    text = TEXT.replace("w8-a16-kv:16", "w16-a16-kv:4~sr2@dyn").split("  - env: ledger")[0]
    text += "  - kind: short_form\n    runner: fake_items\n    task: parity\nbatch: 4\n"
    shortform.register("fake_items", fake_items)
    try:
        with Store(tmp_path / "r.sqlite") as store:
            sink = WandbSink(WandbOptions(project="p", mode="offline"), "s", store, tmp_path, announce=str)
            assert run_sweep(parse_sweep(text), store, progress=False, on_result=sink).done == 2
    finally:
        shortform.unregister("fake_items")
    variant = next(r for r in runs_by_key(tmp_path).values() if r["config"]["spec"] != "baseline")
    assert variant["config"]["batch"] == 4
    assert variant["summary"]["paired/diff"] == pytest.approx(-1 / 8)


def test_every_try_at_logging_a_cell_writes_one_run_id(tmp_path, offline_env):
    # A sweep interrupted while logging a cell logs it again on its next run: that must resume the same
    # W&B run (one per cell), not leave a second one beside the first.
    from qdrift.sweep.execute import CellResult
    from qdrift.sweep.file import WandbOptions

    shortform.register("fake_items", fake_items)
    try:
        (cell,) = unique_cells(parse_sweep(TEXT.split("  - env: ledger")[0].replace(", w8-a16-kv:16", "")
                                           + "  - kind: short_form\n    runner: fake_items\n    task: parity\n"))
    finally:
        shortform.unregister("fake_items")
    result = CellResult(cell, {"item": fake_items(None, None, None)}, None, 1.0, 2.0)
    sink = WandbSink(WandbOptions(project="p", mode="offline"), "s", None, tmp_path, announce=str)
    sink(result)
    sink(result)
    import wandb

    wandb.teardown()  # the service writes the logs asynchronously
    logs = [next(f.glob("run-*.wandb")) for f in sorted((tmp_path / "wandb").glob("offline-run-*"))]
    ids = [r.run.run_id for log in logs for r in records(log) if r.WhichOneof("record_type") == "run"]
    assert ids == [sink.run_id(cell)] * 2  # offline, each try has its folder; `wandb sync` makes them one run
    other = WandbSink(WandbOptions(project="q", mode="offline"), "s", None, tmp_path, announce=str)
    assert other.run_id(cell) != sink.run_id(cell)  # another project's run of the cell is its own
