"""The compounding study's sweep files: they validate, and they measure what their plan says."""

import re
from pathlib import Path

from qdrift.stats.step_power import mde_step_error_ratio
from qdrift.sweep import load_sweep

SWEEPS = Path(__file__).resolve().parents[2] / "paper" / "sweeps"


def test_the_qat_and_sampling_cells_run_the_main_task_beside_its_post_training_int4():
    main, qat, sampled = (load_sweep(SWEEPS / f"{name}.yaml") for name in ("agent", "agent-qat", "agent-sampling"))
    (task,) = main.tasks
    assert len(task.seeds) >= 200 and task.horizons == (64,) and task.sampling == ()
    for other in (qat, sampled):
        (t,) = other.tasks
        assert (t.env, t.knobs, t.horizons, t.max_new_tokens) == (task.env, task.knobs, task.horizons, task.max_new_tokens)
        assert set(t.seeds) <= set(task.seeds)  # the same held-out seeds, so the arms pair
        assert "w4g64-a16-kv:16" in other.specs and "w4g64-a16-kv:16" in main.specs
    assert qat.models == ("smollm2-agent-stage2-qat",) and main.models == ("smollm2-agent-stage2",)
    assert sampled.tasks[0].sampling_options()["samples"] >= 4


def test_the_stated_minimum_detectable_effect_is_the_calculators():
    text = (SWEEPS / "agent.yaml").read_text()
    seeds, rate, horizon, ratio = re.search(
        r"mde_step_error_ratio\((\d+), ([\d.]+), (\d+)\)", text).groups() + (
        re.search(r"rate is ([\d.]+)x the baseline's", text).group(1),)
    assert round(mde_step_error_ratio(int(seeds), float(rate), int(horizon)), 2) == float(ratio)
