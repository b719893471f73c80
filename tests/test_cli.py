"""The command line: help, the quantize job on a built-in tiny model, and clear errors."""

import subprocess
import sys

import pytest

from qdrift.cli import main


def test_help_lists_the_subcommands():
    out = subprocess.run([sys.executable, "-m", "qdrift.cli", "--help"], capture_output=True, text=True, check=True)
    assert "quantize" in out.stdout and "tiny" in out.stdout


def test_quantize_prints_layers_bits_and_kv_bytes(capsys):
    assert main(["quantize", "tiny:llama", "--spec", "w4g128-a16-kv:fp8e4m3@unit", "--new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert "spec: w4g128-a16-kv:fp8e4m3@unit" in out
    assert "quantized modules: 14" in out  # 2 layers x (4 attention + 3 MLP projections)
    assert "bits per quantized weight: 4.125" in out  # 4 bits + a 16-bit scale per 128 weights
    # llama tiny: 2 layers x 2 KV heads x 32 dims x (K and V): 256 elements/token; fp32 = 1024 B, fp8 = 256 B
    assert "KV cache: 256.0 bytes/token (unquantized 1,024.0; x0.250)" in out
    assert "greedy generation with cache: 4 tokens" in out


def test_static_spec_calibrates_on_random_tokens(capsys):
    assert main(["quantize", "tiny:llama", "--spec", "w8-a8t-kv:fp8e4m3@static", "--calibration", "random",
                 "--new-tokens", "2"]) == 0
    assert "spec: w8-a8t-kv:fp8e4m3@static" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["quantize", "tiny:llama", "--spec", "w1-a16-kv:16"], "bad --spec"),
        (["quantize", "no/such/dir", "--spec", "w8-a16-kv:16"], "is not 'organism', 'smollm2', 'tiny:<arch>'"),
        (["quantize", "tiny:lama", "--spec", "w8-a16-kv:16"], "unknown tiny architecture 'lama'.*valid: tiny:llama"),
        (["quantize", "tiny:llama", "--spec", "w8-a8t-kv:16"], "pass calibration"),
    ],
)
def test_bad_arguments_exit_with_a_message(argv, message):
    with pytest.raises((SystemExit, ValueError), match=message):
        main(argv)


def test_a_model_folder_without_a_tokenizer_loads_where_the_tokenizer_is_optional(tmp_path):
    # quantize and real-parity feed random token ids: a folder of weights and config is enough for them.
    import torch

    from qdrift.cli import _load
    from qdrift.models.refs import load_model_ref
    from qdrift.tiny import tiny_model

    tiny_model("llama").save_pretrained(tmp_path)
    with pytest.raises((OSError, ValueError)):  # by default a folder must bring its tokenizer
        load_model_ref(str(tmp_path))
    model, tok = load_model_ref(str(tmp_path), require_tokenizer=False)
    assert tok is None and not model.training
    model, tok = _load(str(tmp_path), "bfloat16")
    assert tok is None and model.dtype == torch.bfloat16
