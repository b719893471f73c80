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
    assert "weights, config and tokenizer" in out  # tiny:ARCH comes with the tiny byte-level tokenizer


def test_a_saved_checkpoint_loads_with_its_tokenizer(capsys, tmp_path):
    from transformers import AutoTokenizer

    from qdrift.cli import _load
    from qdrift.real.checkpoint import load_quantized

    assert main(["real-parity", "organism", "--spec", "w4g128-a16-kv:16", "--save", str(tmp_path / "ckpt")]) == 0
    assert "weights, config and tokenizer" in capsys.readouterr().out
    _, original = _load("organism", "float32")
    saved = AutoTokenizer.from_pretrained(tmp_path / "ckpt")
    text = "lookup k17 answer"
    assert saved(text)["input_ids"] == original(text)["input_ids"]
    assert saved.chat_template == original.chat_template
    assert load_quantized(tmp_path / "ckpt").config.vocab_size == len(original)


def test_real_parity_refuses_specs_without_storage():
    import pytest

    with pytest.raises(SystemExit, match="cannot run on the real path"):
        main(["real-parity", "tiny:llama", "--spec", "w4g32-a8-kv:16"])
