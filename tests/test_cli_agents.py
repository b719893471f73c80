import json

import pytest

from qdrift.cli import main


def test_agents_runs_baseline_and_variant_and_keeps_every_row(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert main(["agents", "--horizons", "1", "2", "--seeds", "2", "--spec", "w8-a16-kv:16", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 8  # 2 configs x 2 horizons x 2 seeds
    assert {r["config"] for r in rows} == {"baseline", "w8-a16-kv:16"}
    assert all(r["seed"] >= 1_000_000 for r in rows)  # held-out seeds only
    text = capsys.readouterr().out
    assert "Paired comparison" in text and "Per-step error rate" in text and "Compounding" in text


@pytest.mark.parametrize("argv, message", [
    (["--spec", "w99"], "bad --spec"),
    (["--horizons", "0"], "horizons must be >= 1"),
    (["--model", "/no/such/dir"], "neither 'organism' nor a local model directory"),
    (["--env", "nosuch"], "bad --env 'nosuch': Unknown environment 'nosuch'.*Available: .*pointer_chase"),
    (["--env", "ledger:echo"], "bad --env 'ledger:echo': .*knobs are written name:key=INT"),
    (["--env", "ledger:bogus=1"], "bad --env 'ledger:bogus=1': unknown knob 'bogus' for ledger; valid knobs: amax"),
    (["--env", "ledger:echo=2"], "bad --env 'ledger:echo=2'"),
])
def test_agents_rejects_bad_input_by_name(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(["agents", *argv])


def test_agents_rows_keep_the_environment_knobs(tmp_path):
    out = tmp_path / "rows.jsonl"
    assert main(["agents", "--env", "ledger:echo=1", "--horizons", "2", "--seeds", "2", "--spec", "w8-a16-kv:16",
                 "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["env"], r["task"]) for r in rows} == {("ledger", "ledger:echo=1")}
