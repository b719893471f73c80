"""A fine-tuning config refuses what makes no sense, naming the field and what is valid."""

import pytest

from qdrift.finetune.config import FinetuneConfig, load_config, recipes
from tests.finetune.conftest import tiny_config


@pytest.mark.parametrize("over, fragment", [
    ({"base": "nope"}, "base: model 'nope'"),
    ({"method": "full"}, "method 'full' is not built; valid: lora"),
    ({"parser": "xml"}, "parser 'xml' is unknown; valid: hermes"),
    ({"steps": 0}, "steps must be an integer >= 1"),
    ({"lr": 2}, "lr must be in (0, 1)"),
    ({"lora_targets": ["qproj"]}, "lora_targets: unknown ['qproj']"),
    ({"qat": "w4g64-a8-kv:16"}, "must quantize the weights of every decoder Linear only"),
    ({"mix": []}, "at least one environment"),
    ({"mix": [{"env": "pointer_chase", "horizons": [4, 1]}]}, "horizons must be [lo, hi]"),
    ({"mix": [{"env": "dict_sum", "horizons": [1, 2], "knobs": {"vmax": [0]}}]}, "vmax must be in 1..999"),
    ({"mix": [{"env": "dict_sum", "horizons": [1, 2], "knobs": {"nope": [1]}}]}, "unknown knob 'nope'"),
    ({"mix": [{"env": "nowhere", "horizons": [1, 2]}]}, "mix[0]"),
    ({"colour": 1}, "unknown key 'colour'"),
])
def test_bad_configs_are_refused_with_the_field_named(over, fragment):
    with pytest.raises(ValueError) as e:
        tiny_config(**over)
    assert fragment in str(e.value)


def test_the_hash_covers_what_is_trained_but_not_the_checkpoint_interval():
    assert tiny_config().hash() == tiny_config(checkpoint_every_s=999).hash()
    assert tiny_config().hash() != tiny_config(lr=1e-4).hash()
    assert tiny_config().hash() != tiny_config(qat="w4g64").hash()


def test_round_trip_and_the_shipped_recipe():
    cfg = tiny_config()
    assert FinetuneConfig.from_dict(cfg.to_dict()) == cfg
    assert "smollm2-agent" in recipes()
    shipped = load_config("smollm2-agent")
    assert shipped.base == "smollm2" and shipped.parser == "pythonic" and len(shipped.mix) >= 3


def test_an_unknown_recipe_lists_the_shipped_ones(tmp_path):
    with pytest.raises(ValueError, match="recipes: .*smollm2-agent"):
        load_config("smollm3-agent")
    with pytest.raises(FileNotFoundError):
        load_config(tmp_path / "missing.yaml")


def test_a_config_can_extend_another_replacing_some_keys(tmp_path):
    qat = load_config("smollm2-agent-stage2-qat")
    base = load_config("smollm2-agent-stage2")
    assert qat.qat == "w4g64" and qat.to_dict() == {**base.to_dict(), "qat": "w4g64"}
    loop = tmp_path / "loop.yaml"
    loop.write_text(f"extends: {loop}\n")
    with pytest.raises(ValueError, match="extends itself"):
        load_config(loop)
