"""Training is deterministic under its seed, and a stopped or killed run resumes to the same weights."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from safetensors.torch import load_file

from qdrift.finetune.train import CHECKPOINT, ConfigMismatch, finetune, lr_at
from tests.finetune.conftest import tiny_config


def adapter(path):
    return load_file(str(path / "adapter_model.safetensors"))


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run of the tiny config."""
    out = tmp_path_factory.mktemp("ref")
    finetune(tiny_config(), out, progress=False)
    return out


def test_a_run_writes_the_adapter_summary_and_one_log_line_per_step(reference):
    assert not (reference / CHECKPOINT).exists()
    summary = json.loads((reference / "finetune.json").read_text())
    assert summary["steps"] == 6 and summary["tokens"] > 0 and summary["base_fingerprint"]
    log = [json.loads(line) for line in (reference / "train_log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in log] == list(range(6))
    assert all(r["target_tokens"] > 0 and r["loss"] == r["loss"] for r in log)
    assert adapter(reference)  # peft's safetensors adapter


def test_the_same_seed_gives_the_same_weights_and_another_seed_does_not(reference, tmp_path):
    finetune(tiny_config(), tmp_path / "again", progress=False)
    assert same(adapter(reference), adapter(tmp_path / "again"))
    finetune(tiny_config(seed=1), tmp_path / "other", progress=False)
    assert not same(adapter(reference), adapter(tmp_path / "other"))


def test_bf16_autocast_trains_and_repeats_bit_for_bit(tmp_path):
    cfg = tiny_config(autocast_bf16=True, steps=1)
    finetune(cfg, tmp_path / "a", progress=False)
    finetune(cfg, tmp_path / "b", progress=False)
    assert same(adapter(tmp_path / "a"), adapter(tmp_path / "b"))
    assert not same(adapter(tmp_path / "a"), adapter(_fp32_one_step(tmp_path)))


def _fp32_one_step(tmp_path):
    finetune(tiny_config(steps=1), tmp_path / "fp32", progress=False)
    return tmp_path / "fp32"


def test_stopping_and_resuming_reaches_the_uninterrupted_result(reference, tmp_path):
    out = tmp_path / "resumed"
    finetune(tiny_config(), out, progress=False, stop_after=2)
    assert (out / CHECKPOINT).is_file() and not (out / "finetune.json").exists()
    finetune(tiny_config(), out, progress=False, stop_after=3)
    finetune(tiny_config(), out, progress=False)
    assert same(adapter(reference), adapter(out))
    log = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert log == list(range(6))


def test_kill_9_then_rerun_continues_to_the_same_result(reference, tmp_path):
    cfg_file = tmp_path / "tiny.yaml"
    cfg_file.write_text(yaml.safe_dump(tiny_config().to_dict()))
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "qdrift.cli", "finetune", "run", str(cfg_file), "--out", str(out), "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / CHECKPOINT).exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "finetune.json").exists(), "the run finished before it could be killed"
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert same(adapter(reference), adapter(out))


def test_resuming_with_another_configuration_is_refused_and_changes_nothing(tmp_path):
    out = tmp_path / "run"
    finetune(tiny_config(), out, progress=False, stop_after=1)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(ConfigMismatch, match=r"another configuration \(lr: 0.0003 there, 0.0001 now\)"):
        finetune(tiny_config(lr=1e-4), out, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_finished_run_is_not_trained_again(reference):
    before = adapter(reference)
    finetune(tiny_config(), reference, progress=False)
    assert same(before, adapter(reference))


def test_the_schedule_warms_up_then_decays_by_step():
    cfg = tiny_config(steps=100, warmup_steps=10, lr=1e-3)
    assert lr_at(cfg, 0) == pytest.approx(1e-4) and lr_at(cfg, 9) == pytest.approx(1e-3)
    assert lr_at(cfg, 10) == pytest.approx(1e-3) and lr_at(cfg, 99) == pytest.approx(1e-4, rel=0.01)
    assert all(lr_at(cfg, s) >= lr_at(cfg, s + 1) for s in range(10, 99))


def test_a_second_stage_starts_from_the_first_stages_adapter(reference, tmp_path):
    from qdrift.finetune.train import build_model

    cfg = tiny_config(init_from=str(reference), steps=1)
    model, _, _ = build_model(cfg)
    first = adapter(reference)
    named = dict(model.named_parameters())
    for k, t in first.items():
        torch.testing.assert_close(named[k.replace(".weight", ".default.weight")], t)
    finetune(cfg, tmp_path / "stage2", progress=False)
    info = json.loads((tmp_path / "stage2" / "finetune.json").read_text())
    assert info["init_from"]["ref"] == str(reference) and info["init_from"]["summary"]["steps"] == 6


def test_init_from_must_be_a_fine_tune_of_the_same_base_and_shape(reference):
    with pytest.raises(ValueError, match="init_from: 'nowhere' is neither"):
        tiny_config(init_from="nowhere")
    with pytest.raises(ValueError, match="init_from: .* is a rank-4 adapter .* they must match"):
        tiny_config(init_from=str(reference), lora_r=8)


def test_a_changed_init_adapter_is_a_changed_configuration(reference, tmp_path):
    import shutil

    source = shutil.copytree(reference, tmp_path / "source")
    cfg = tiny_config(init_from=str(source), steps=2)
    out = tmp_path / "stage2"
    finetune(cfg, out, progress=False, stop_after=1)
    weights = load_file(str(source / "adapter_model.safetensors"))
    weights = {k: v + 1 for k, v in weights.items()}
    from safetensors.torch import save_file

    save_file(weights, str(source / "adapter_model.safetensors"))
    again = tiny_config(init_from=str(source), steps=2)
    assert again.to_dict() == cfg.to_dict() and again.hash() != cfg.hash()
    with pytest.raises(ConfigMismatch, match="the adapter init_from .* names has changed since"):
        finetune(again, out, progress=False)
