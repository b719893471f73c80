"""`qdrift finetune` and `qdrift calibrate` on the command line: they run, and bad input exits with a message."""

import json

import pytest
import yaml

from qdrift.cli import main
from tests.finetune.conftest import tiny_config


def test_run_then_card_on_a_tiny_model(tmp_path, capsys):
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config(steps=2).to_dict()))
    out = tmp_path / "run"
    assert main(["finetune", "run", str(cfg), "--out", str(out), "--no-progress"]) == 0
    settings = tmp_path / "card.yaml"
    settings.write_text(yaml.safe_dump({"seeds": 2, "batch": 2, "notes": "a tiny random model",
                                        "settings": [{"env": "ledger", "knobs": {"amax": 9}, "horizon": 2}]}))
    assert main(["finetune", "card", str(out), "--settings", str(settings), "--out", str(out)]) == 0
    card = json.loads((out / "card.json").read_text())
    row = card["settings"][0]
    assert row["env"] == "ledger" and row["horizon"] == 2 and row["seeds"] == [1_000_000, 1_000_001]
    assert 0 <= row["per_step_ci"][0] <= row["per_step_accuracy"] <= row["per_step_ci"][1] <= 1
    assert card["training"]["steps"] == 2 and "pythonic" in card["tool_prompt"]
    text = (out / "MODEL_CARD.md").read_text()
    assert "| ledger | amax=9 | 2 |" in text and "a tiny random model" in text


@pytest.mark.parametrize("argv, message", [
    (["finetune", "run", "smollm3-agent", "--out", "x"], "bad fine-tuning config: 'smollm3-agent' is neither"),
    (["calibrate", "tiny:llama", "--env", "dict_sum", "--knob", "vmaxx", "--values", "1", "9", "--target", "0.9",
      "--horizon", "2"], "dict_sum has no knob 'vmaxx'"),
    (["calibrate", "tiny:llama", "--env", "dict_sum", "--knob", "vmax", "--values", "1", "9", "--target", "1.9",
      "--horizon", "2"], "--target must be a per-step accuracy in"),
    (["calibrate", "nope", "--env", "dict_sum", "--knob", "vmax", "--values", "1", "9", "--target", "0.9",
      "--horizon", "2"], "bad model 'nope'"),
])
def test_bad_input_exits_with_a_message(argv, message):
    with pytest.raises(SystemExit, match=message):
        main(argv)


def test_card_refuses_a_bad_settings_file(tmp_path):
    settings = tmp_path / "card.yaml"
    settings.write_text(yaml.safe_dump({"settings": [{"env": "ledger", "horizon": 2, "knobs": {"amax": 0}}]}))
    with pytest.raises(SystemExit, match=r"settings\[0\]: amax must be in 1..1000000"):
        main(["finetune", "card", "tiny:llama", "--settings", str(settings), "--out", str(tmp_path)])
