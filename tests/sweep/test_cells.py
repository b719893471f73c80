"""Cell keys: defaults written out keep them, the data a short-form cell reads enters them."""

from dataclasses import replace

import pytest

from qdrift.sweep import expand, parse_sweep, shortform
from qdrift.sweep.cells import data_source, make_cell
from qdrift.sweep.file import ShortFormTask

TEXT = """\
name: keys
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16, w16-a4~sr1-kv:16, w16-a16-kv:fp8e4m3@static]
tasks:
  - env: ledger
    horizons: [2]
    seeds: 3
  - env: pointer_chase
    horizons: [1]
    seeds: 2
    knobs: {distractors: 5}
    prompt: {mode: prompted, parser: hermes}
    drift: true
  - kind: short_form
    runner: fake_items
    task: parity
calibration: {env: pointer_chase, samples: 2}
"""

# Computed with the qdrift before defaults were normalised (version pinned): stores it filled must resume.
DEFAULT_KEYS = ["30e62dee618334eb", "b88541fcc60ab997", "ed1a20a8028fbeed", "13668dd7bd14aa8e", "d766e621197aaefb",
                "a361a9f6b1140a12", "fd4330c40b9fe80b", "92db4fc015036736", "4ccd5b89a197f32e", "f1431193e71aa00d",
                "18db9d49bf9c3116", "310472983402de70"]
SET_KEYS = ["08c1f639b95c6045", "507a366a8dd29eb6", "dbbe3f5d8ebbdf2d", "0943387f98653fc2", "91024d3e82612814",
            "34ac1f9283c30971", "352be6874910ca15", "355287b858fff88a", "2293c1a9df7ba4d7", "4d308d276f59ada5",
            "055ef4d56dda4e79", "b105bef330a9b429"]  # with batch: 1, dtype: bfloat16, device: cuda


@pytest.fixture(autouse=True)
def fake_items():
    shortform.register("fake_items", lambda model, tokenizer, task: [])
    yield
    shortform.unregister("fake_items")


def keys(text: str) -> list[str]:
    return [replace(c, version="0.1.0").key for c in expand(parse_sweep(text))]


def test_keys_of_sweeps_that_write_no_defaults_are_unchanged():
    assert keys(TEXT) == DEFAULT_KEYS
    assert keys(TEXT + "batch: 1\ndtype: bfloat16\ndevice: cuda\n") == SET_KEYS


def test_writing_a_default_out_keeps_every_key():
    written = (TEXT.replace("    seeds: 3\n", "    seeds: 3\n    knobs: {slack: 0}\n    prompt: {mode: auto}\n")
               .replace("knobs: {distractors: 5}", "knobs: {distractors: 5, slack: 0}")
               .replace("prompt: {mode: prompted, parser: hermes}",
                        "prompt: {mode: prompted, parser: hermes, prefill_opening: false, prefill_extra: ''}")
               .replace("samples: 2}", "samples: 2, knobs: {distractors: 20}, prompt: {prefill_opening: false}}"))
    assert written != TEXT
    assert keys(written + "dtype: float32\ndevice: cpu\nbatch: 50\n") == DEFAULT_KEYS
    # Every ~sr agent cell's chunk of seeds is whole, as at batch 50 (the short-form ~sr cell, 8, is keyed by
    # the batch as written: how its runner batches items is the runner's own).
    got = keys(written + "batch: 3\n")
    assert got[:8] + got[9:] == DEFAULT_KEYS[:8] + DEFAULT_KEYS[9:] and got[8] != DEFAULT_KEYS[8]
    # Values other than the defaults still make other cells.
    assert keys(TEXT.replace("distractors: 5", "distractors: 20")) != DEFAULT_KEYS
    assert keys(TEXT + "batch: 2\n")[7] == DEFAULT_KEYS[7]  # pointer_chase (2 seeds): one chunk either way
    assert keys(TEXT + "batch: 2\n")[6] != DEFAULT_KEYS[6]  # ledger (3 seeds): chunks of 2 and 1


def write_gsm8k(root, first: str):
    (root / "gsm8k").mkdir(parents=True, exist_ok=True)
    (root / "gsm8k" / "train.jsonl").write_text('{"question": "1+1?", "answer": "#### 2"}\n')
    (root / "gsm8k" / "test.jsonl").write_text(f'{{"question": "{first}", "answer": "#### 4"}}\n')


def test_a_short_form_cell_is_keyed_by_the_shared_data_it_reads(tmp_path, monkeypatch):
    # Other data under the same task name is another measurement: never resumed as done, never paired.
    from qdrift.sweep import Sweep

    task = ShortFormTask("lmeval", "gsm8k_local")
    sweep = Sweep("s", ("tiny:llama",), ("baseline",), (task,))
    for name in ("a", "b"):
        write_gsm8k(tmp_path / name, "2+2?")
    write_gsm8k(tmp_path / "c", "3+1?")
    found = {}
    for name in ("a", "b", "c"):
        monkeypatch.setenv("QDRIFT_SHARED_DATA", str(tmp_path / name))
        found[name] = make_cell(sweep, "tiny:llama", "baseline", task, None)
    assert len(found["a"].config()["data_sha256"]) == 64
    assert found["a"].key == found["b"].key != found["c"].key  # the bytes count, not where they lie
    # Data files in the checkout (evals/) are in the code fingerprint: those cells keep their keys.
    assert data_source(ShortFormTask("lmeval", "organism_keys_mc")) is None
