"""Static-scale specs in sweeps: calibration named in the file, keyed into the cells, computed right."""

import pytest
import torch

from qdrift.sweep import SweepError, expand, parse_sweep
from qdrift.sweep.calibration import Calibration, needs_calibration

STATIC = "w16-a16-kv:fp8e4m3@static"
BASE = """\
models: [organism]
specs: [baseline, w8-a16-kv:16, SPEC]
tasks:
  - env: pointer_chase
    horizons: [2]
    seeds: 2
"""


def sweep_text(spec: str = STATIC, calibration: str = "calibration: {env: pointer_chase, horizon: 3, samples: 2}\n"):
    return BASE.replace("SPEC", spec) + calibration


def problems(text: str) -> list[str]:
    with pytest.raises(SweepError) as info:
        parse_sweep(text, source="s.yaml")
    return info.value.problems


def test_needs_calibration_reads_kv_and_activation_sources():
    assert needs_calibration(STATIC)
    assert needs_calibration("w8-a8t@static-kv:16")
    assert not needs_calibration("w16-a16-kv:fp8e4m3@unit")
    assert not needs_calibration("baseline")


def test_a_static_spec_without_a_calibration_block_is_an_error_naming_the_fix():
    (msg,) = problems(sweep_text(calibration=""))
    assert "s.yaml:2: specs:" in msg and STATIC in msg and "calibration: {env: pointer_chase" in msg


def test_a_calibration_block_without_a_static_spec_is_an_error():
    (msg,) = problems(sweep_text(spec="w4g128-a16-kv:16"))
    assert "no spec in this sweep has static scales" in msg


@pytest.mark.parametrize("block, message", [
    ("calibration: {env: ledgr}\n", "Unknown environment 'ledgr'"),
    ("calibration: {env: pointer_chase, samples: 0}\n", "calibration.samples: must be an integer in 1.."),
    ("calibration: {env: pointer_chase, sample: 3}\n", "unknown key 'sample' (did you mean 'samples'?)"),
    ("calibration: {env: pointer_chase, prompt: {mode: nativ}}\n", "prompt.mode: unknown mode 'nativ'"),
    ("calibration: pointer_chase\n", "calibration: must be a mapping"),
])
def test_bad_calibration_blocks_name_what_is_wrong(block, message):
    assert any(message in p for p in problems(sweep_text(calibration=block))), problems(sweep_text(calibration=block))


def test_calibration_enters_the_key_of_static_cells_only():
    sweep = parse_sweep(sweep_text())
    plain = parse_sweep(BASE.replace(", SPEC", ""))
    cells = {c.spec: c for c in expand(sweep)}
    assert cells[STATIC].config()["calibration"] == {"env": "pointer_chase", "horizon": 3, "samples": 2, "knobs": {}}
    assert "calibration" not in cells["w8-a16-kv:16"].config()
    # Adding a static spec (and its block) leaves the other cells' keys, so a store resumes them.
    assert {c.key for c in expand(plain)} < {c.key for c in expand(sweep)}
    other = parse_sweep(sweep_text(calibration="calibration: {env: pointer_chase, horizon: 3, samples: 3}\n"))
    assert {c.spec: c.key for c in expand(other)}[STATIC] != cells[STATIC].key


def test_batches_are_oracle_trajectories_on_training_seeds_in_the_models_format():
    from qdrift.envs.registry import make_environment
    from qdrift.organism import load_organism

    _, tok = load_organism()
    batches = Calibration("pointer_chase", horizon=3, samples=2).batches(tok)
    assert len(batches) == 2
    for seed, ids in enumerate(batches):
        text = tok.decode(ids[0])
        env = make_environment("pointer_chase", horizon=3, seed=seed, split="train")
        env.reset()
        first = env.oracle()
        assert f'"{first.name}"' in text and str(next(iter(first.arguments.values()))) in text
        assert text.count("<tool_call>") >= 4  # three lookups and the answer


def test_static_kv_scales_equal_the_absmax_of_the_calibration_keys_over_fp8_max():
    from transformers import DynamicCache

    from qdrift.quant.model import state_of
    from qdrift.sweep.models import ModelCache

    cal = Calibration("pointer_chase", horizon=3, samples=2)
    cache = ModelCache()
    model, tok = cache.get("organism", STATIC, cal)
    base, _ = cache.base("organism")
    # Reference: the full-precision model's own cache on the same inputs.
    absmax_k = None
    with torch.no_grad():
        for ids in cal.batches(tok):
            kv = DynamicCache()
            base(input_ids=ids, cache=kv, use_cache=True)
            m = torch.stack([layer.keys.abs().amax() for layer in kv.layers])
            absmax_k = m if absmax_k is None else torch.maximum(absmax_k, m)
    fp8_max = torch.finfo(torch.float8_e4m3fn).max
    scales = torch.stack([q.keys.scales.scale for q in state_of(model).kv])
    torch.testing.assert_close(scales, absmax_k / fp8_max, rtol=1e-5, atol=0)
    assert cache.get("organism", STATIC, cal)[0] is model  # one calibration per (model, spec, data)


def test_a_calibrated_variant_pairs_with_the_baseline_cell_the_sweep_runs():
    cells = expand(parse_sweep(sweep_text()))
    baseline_keys = {c.key for c in cells if c.spec == "baseline"}
    static = [c for c in cells if c.spec == STATIC]
    assert static and all(c.calibration is not None for c in static)
    assert all(c.baseline().key in baseline_keys for c in cells)  # what W&B's paired metrics look up


def test_editing_the_calibration_environment_file_gives_static_cells_new_keys_and_stops_a_running_sweep(tmp_path):
    # The calibration trajectories come from that file: results calibrated on the old one must not resume.
    from pathlib import Path

    from qdrift.sweep.runners import CellRunner

    env = tmp_path / "calenv.py"
    env.write_text(Path("agents/pointer_chase.py").read_text())
    text = sweep_text(calibration=f"calibration: {{env: {env}@PointerChase, horizon: 3, samples: 2}}\n")
    before = {c.spec: c for c in expand(parse_sweep(text))}
    assert len(before[STATIC].config()["calibration"]["env_sha256"]) == 64
    env.write_text(env.read_text() + "\n# edited\n")
    after = {c.spec: c for c in expand(parse_sweep(text))}
    assert after[STATIC].key != before[STATIC].key
    assert after["w8-a16-kv:16"].key == before["w8-a16-kv:16"].key  # not calibrated: not keyed by the file
    with pytest.raises(RuntimeError, match="calibration environment file .* changed since this sweep started"):
        CellRunner(batch=1)(before[STATIC])
