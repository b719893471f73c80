"""Model references: a local folder whose weights cannot be read is one error naming the file."""

import pytest

from qdrift.tiny import tiny_model


def test_a_truncated_safetensors_is_named_not_a_traceback(tmp_path):
    from qdrift.cli import main

    folder = tmp_path / "m"
    tiny_model("llama").save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(SystemExit, match=r"qdrift: model .*m: its weights \(model.safetensors\) cannot be read: "
                                         r"Error while deserializing header.*truncated or damaged"):
        main(["quantize", str(folder), "--spec", "w8-a16-kv:16"])
