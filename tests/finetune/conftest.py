import pytest

from qdrift.finetune.config import FinetuneConfig


def tiny_config(**over) -> FinetuneConfig:
    """A fine-tune of the random tiny Llama that takes a few seconds. In fp32: bf16 autocast crawls on
    CPUs without native bf16 (test_train covers it on its own)."""
    d = {"base": "tiny:llama", "parser": "pythonic", "autocast_bf16": False, "steps": 6, "episodes_per_step": 2, "warmup_steps": 1,
         "max_tokens": 4096, "lora_r": 4, "lora_alpha": 8, "checkpoint_every_s": 0.0,
         "mix": [{"env": "pointer_chase", "horizons": [1, 3]},
                 {"env": "dict_sum", "horizons": [1, 2], "knobs": {"vmax": [3, 9]}}]}
    d.update(over)
    return FinetuneConfig.from_dict(d)


@pytest.fixture
def tiny_cfg():
    return tiny_config()
