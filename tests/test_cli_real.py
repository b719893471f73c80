import json

from qdrift.cli import main


def test_real_parity_prints_paths_and_divergence(capsys, tmp_path):
    assert main(["real-parity", "tiny:llama", "--spec", "w4g128z-a16-kv:16", "--dtype", "bfloat16",
                 "--kernel", "fused", "--json", "--save", str(tmp_path / "ckpt")]) == 0
    out = capsys.readouterr().out
    assert "real path: real | tinygemm-int4" in out and "fake path: fake | fake-quant" in out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["real"]["dtype"] == "bfloat16" and len(report["layers"]) == 14
    assert (tmp_path / "ckpt" / "model.safetensors").exists()


def test_real_parity_refuses_specs_without_storage():
    import pytest

    with pytest.raises(SystemExit, match="cannot run on the real path"):
        main(["real-parity", "tiny:llama", "--spec", "w4g32-a8-kv:16"])
