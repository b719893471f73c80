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
    (["--horizons", "4", "4"], r"horizons must be distinct, got \[4, 4\]"),
    (["--model", "/no/such/dir"], "bad --model '/no/such/dir': model '/no/such/dir' is not 'organism', 'smollm2'"),
    (["--env", "/no/such/file.py@X"], "bad --env '/no/such/file.py@X'"),
    (["--env", "nosuch"], "bad --env 'nosuch': Unknown environment 'nosuch'.*Available: .*pointer_chase"),
    (["--env", "ledger:echo"], "bad --env 'ledger:echo': .*knobs are written name:key=INT"),
    (["--env", "ledger:bogus=1"], "bad --env 'ledger:bogus=1': unknown knob 'bogus' for ledger; valid knobs: amax"),
    (["--env", "ledger:echo=2"], "bad --env 'ledger:echo=2'"),
])
def test_agents_rejects_bad_input_by_name(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(["agents", *argv])


@pytest.mark.parametrize("flag, value", [("--seeds", "0"), ("--seeds", "-1"), ("--batch", "0"), ("--threads", "0")])
def test_agents_numbers_below_one_are_usage_errors(flag, value, capsys):
    with pytest.raises(SystemExit) as info:
        main(["agents", flag, value])
    assert info.value.code == 2 and f"{flag}: must be an integer >= 1, got '{value}'" in capsys.readouterr().err


def test_one_seed_runs_and_says_which_statistics_it_cannot_compute(tmp_path, capsys):
    # The episodes ran, then the cluster-robust statistics raised and the command ended in a traceback.
    assert main(["agents", "--model", "tiny:llama", "--horizons", "1", "--seeds", "1", "--spec", "w8-a16-kv:16",
                 "--out", str(tmp_path / "rows.jsonl")]) == 0
    assert "not computed (only 1 cluster(s)" in capsys.readouterr().out


def test_agents_rows_keep_the_environment_knobs(tmp_path):
    out = tmp_path / "rows.jsonl"
    assert main(["agents", "--env", "ledger:echo=1", "--horizons", "2", "--seeds", "2", "--spec", "w8-a16-kv:16",
                 "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["env"], r["task"]) for r in rows} == {("ledger", "ledger:echo=1")}


def test_agents_drift_replays_the_baseline_through_each_variant(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert main(["agents", "--env", "ledger:echo=1", "--horizons", "1", "3", "--seeds", "2", "--drift",
                 "--spec", "w16-a16-kv:16", "w3g128-a16-kv:16", "--out", str(out)]) == 0
    episodes = [json.loads(line) for line in out.read_text().splitlines()]
    drift = [json.loads(line) for line in (tmp_path / "rows.drift.jsonl").read_text().splitlines()]
    base = {(r["horizon"], r["seed"]) for r in episodes if r["config"] == "baseline"}
    for spec in ("w16-a16-kv:16", "w3g128-a16-kv:16"):
        rows = [r for r in drift if r["config"] == spec]
        assert {(r["horizon"], r["seed"]) for r in rows} == base  # every baseline episode replayed
        ids = {(r["horizon"], r["seed"]): r["episode"] for r in rows}
        assert len(set(ids.values())) == len(ids)  # one cluster id per episode, over horizons too
        assert max(r["step"] for r in rows if r["horizon"] == 3) >= 2  # every step of the longer episodes
    # A spec that leaves every tensor as it is gives KL exactly 0 on every token; int3 weights do not.
    assert all(r["kl"] == 0 and r["top1_agree"] for r in drift if r["config"] == "w16-a16-kv:16")
    assert max(r["kl"] for r in drift if r["config"] == "w3g128-a16-kv:16") > 1e-4
    text = capsys.readouterr().out
    assert text.count("Token divergence: baseline vs variant") == 2
    assert "Drift along the trajectory" in text


def test_a_spec_that_defers_kv_quantization_runs_batched_episodes_and_drift_replays(tmp_path):
    # its token blocks and window count each row's own tokens, padding excluded
    assert main(["agents", "--model", "tiny:llama", "--horizons", "1", "2", "--seeds", "2", "--drift",
                 "--spec", "w16-a16-kv:4@dyn-win4", "--out", str(tmp_path / "rows.jsonl")]) == 0
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 8
