"""Difficulty calibration: bisection on calibration seeds for the knob value nearest a target accuracy."""

import pytest

from qdrift.envs import calibrate as cal_mod
from qdrift.envs.calibrate import calibrate, dev_seeds
from qdrift.envs.registry import DEV_SEEDS_FROM, TRAIN_SEEDS_BELOW


def fake_measure(curve, seen):
    def measure(policy_factory, env, horizon, seeds, knobs, batch_size=16, split=None):
        seen.append((knobs["vmax"], list(seeds)))
        a = curve[knobs["vmax"]]
        return {"env": env, "knobs": knobs, "horizon": horizon, "per_step_accuracy": a, "per_step_ci": [a, a],
                "steps": 100, "success": a ** horizon, "success_ci": [0, 1], "episodes": len(seeds)}
    return measure


VALUES = [1, 3, 9, 19, 49, 99, 199, 499, 999]


def test_bisection_finds_the_value_nearest_the_target_measuring_few(monkeypatch):
    curve = dict(zip(VALUES, [1.0, 1.0, 0.998, 0.995, 0.985, 0.97, 0.93, 0.8, 0.6], strict=True))
    seen = []
    monkeypatch.setattr(cal_mod, "measure", fake_measure(curve, seen))
    cal = calibrate(None, "dict_sum", "vmax", VALUES, 0.98, horizon=8, n_seeds=4)
    assert cal.chosen["knobs"]["vmax"] == 49
    assert len(seen) <= 2 + 4  # both ends, then log2(9) bisections
    assert all(s == list(range(DEV_SEEDS_FROM, DEV_SEEDS_FROM + 4)) for _, s in seen)
    assert "vmax=49" in cal.summary() and "<- chosen" in cal.summary()


def test_a_target_out_of_reach_says_which_way_to_move(monkeypatch):
    monkeypatch.setattr(cal_mod, "measure", fake_measure(dict.fromkeys(VALUES, 1.0), []))
    cal = calibrate(None, "dict_sum", "vmax", VALUES, 0.98, horizon=8, n_seeds=4)
    assert cal.chosen["knobs"]["vmax"] == 999 and "give harder values" in cal.note
    assert "outside the measurable regime" in cal.note


def test_one_value_is_measured_and_placed_against_the_target(monkeypatch):
    seen = []
    monkeypatch.setattr(cal_mod, "measure", fake_measure({49: 0.97}, seen))
    cal = calibrate(None, "dict_sum", "vmax", [49], 0.98, horizon=8, n_seeds=4)
    assert [v for v, _ in seen] == [49] and cal.chosen["knobs"]["vmax"] == 49
    assert "0.9700 below the target 0.98" in cal.note and "outside" not in cal.note


@pytest.mark.parametrize("kwargs, fragment", [
    ({"knob": "nope"}, "dict_sum has no knob 'nope'; its knobs: k, keys, vmax, keyspace"),
    ({"values": [1, 1]}, "distinct candidate values"),
    ({"values": []}, "distinct candidate values"),
    ({"values": [1, 5000]}, "vmax must be in 1..999"),
    ({"target": 1.5}, "target must be a per-step accuracy in (0, 1)"),
])
def test_bad_requests_are_refused_before_anything_runs(kwargs, fragment):
    args = {"knob": "vmax", "values": [1, 9], "target": 0.98}
    args.update(kwargs)
    with pytest.raises(ValueError) as e:
        calibrate(None, "dict_sum", args["knob"], args["values"], args["target"], horizon=4)
    assert fragment in str(e.value)


def test_calibration_seeds_are_training_seeds_fine_tuning_never_draws():
    seeds = dev_seeds(3)
    assert seeds == [DEV_SEEDS_FROM, DEV_SEEDS_FROM + 1, DEV_SEEDS_FROM + 2] and max(seeds) < TRAIN_SEEDS_BELOW
    with pytest.raises(ValueError, match="calibration seeds"):
        dev_seeds(TRAIN_SEEDS_BELOW)


def test_measure_runs_real_episodes_on_a_model():
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.calibrate import measure
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.tiny import tiny_model, tiny_tokenizer

    model, tok = tiny_model("llama").eval(), tiny_tokenizer()
    prompt = tool_prompt_for(tok, mode="prompted", parser="pythonic")
    m = measure(lambda: HFPolicy(model, tok, prompt, max_new_tokens=4), "ledger", 2, dev_seeds(2), {"amax": 9})
    assert m["episodes"] == 2 and m["steps"] == 6 and 0 <= m["per_step_accuracy"] <= 1
    assert m["seeds"] == [DEV_SEEDS_FROM, DEV_SEEDS_FROM + 1]
