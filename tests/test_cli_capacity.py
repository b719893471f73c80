import json

import pytest

from qdrift.capacity import KIMI_K2_RESERVE_GIB, PRESETS
from qdrift.cli import main


def test_capacity_prints_tokens_for_each_kv_precision(capsys):
    assert main(["capacity", "kimi-k2", "--weights", "int4", "--kv", "bf16", "fp8", "--reserve", str(KIMI_K2_RESERVE_GIB)]) == 0
    out = capsys.readouterr().out
    assert "686,108" in out and "1,372,216" in out and "routed_experts" in out


def test_capacity_reads_a_config_json(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(PRESETS["llama-3.1-8b"]["config"]))
    assert main(["capacity", str(tmp_path), "--gpus", "1", "--tp", "1", "--gpu-mem", "80"]) == 0
    assert "131,072 bytes per token" in capsys.readouterr().out


def test_capacity_rejects_unknown_model_and_precision():
    with pytest.raises(SystemExit, match="neither a preset"):
        main(["capacity", "no-such-model"])
    with pytest.raises(SystemExit, match="Valid"):
        main(["capacity", "kimi-k2", "--weights", "int3"])
