"""Model fingerprints: a sha256 over the files that fix what a reference computes, checked directly."""

import hashlib

import pytest

from qdrift.models.fingerprint import model_files, model_fingerprint


def make_dir(folder, weights=b"\x00\x01weights", config=b'{"a": 1}'):
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "config.json").write_bytes(config)
    (folder / "MODEL_CARD.md").write_text("prose does not change what the model computes")
    return folder


def test_directory_fingerprint_is_the_sha256_of_each_files_name_and_sha256_in_name_order(tmp_path):
    folder = make_dir(tmp_path / "m")
    config_sha = hashlib.sha256(b'{"a": 1}').hexdigest()
    weights_sha = hashlib.sha256(b"\x00\x01weights").hexdigest()
    lines = f"config.json\t{config_sha}\nmodel.safetensors\t{weights_sha}\n"
    want = hashlib.sha256(lines.encode()).hexdigest()
    assert model_fingerprint(str(folder)) == want
    assert [f.name for f in model_files(str(folder))] == ["config.json", "model.safetensors"]


def test_same_files_elsewhere_match_and_any_changed_byte_does_not(tmp_path):
    a = model_fingerprint(str(make_dir(tmp_path / "a")))
    assert model_fingerprint(str(make_dir(tmp_path / "b"))) == a
    assert model_fingerprint(str(make_dir(tmp_path / "c", weights=b"\x00\x02weights"))) != a
    assert model_fingerprint(str(make_dir(tmp_path / "d", config=b'{"a": 2}'))) != a


def test_builtins_and_bad_references(tmp_path):
    assert model_fingerprint("tiny:llama") == hashlib.sha256(b"tiny:llama").hexdigest()
    names = {f.name for f in model_files("organism")}
    assert {"model.safetensors", "config.json", "tokenizer.json"} <= names and "MODEL_CARD.md" not in names
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="no weight file"):
        model_fingerprint(str(empty))
    with pytest.raises(ValueError, match="valid built-ins"):
        model_fingerprint(str(tmp_path / "missing"))


def test_a_folder_holding_only_a_gguf_is_refused_with_what_to_do(tmp_path):
    from qdrift.models.refs import check_model_ref

    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    problem = check_model_ref(str(tmp_path))
    assert problem is not None and "holds only a .gguf file" in problem and "convert it to safetensors" in problem
