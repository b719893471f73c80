"""Fine-tunes load by folder (or shipped name): merged onto the base they were trained on, prompted as trained."""

import json
import shutil

import pytest
import torch

from qdrift.envs.prompting import tool_prompt_for
from qdrift.finetune.train import build_model, finetune
from qdrift.models.fingerprint import model_files
from qdrift.models.refs import check_model_ref, load_model_ref
from tests.finetune.conftest import tiny_config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("ft")
    finetune(tiny_config(steps=2), out, progress=False)
    return out


def test_a_fine_tune_folder_loads_as_the_base_with_the_adapter_merged(trained):
    assert check_model_ref(str(trained)) is None
    model, tok = load_model_ref(str(trained))
    # merged by hand from the adapter file: base weight + B A * alpha / r
    peft_model, _, _ = build_model(tiny_config(steps=2))
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(peft_model, load_file(str(trained / "adapter_model.safetensors")))
    layer = peft_model.base_model.model.model.layers[0].self_attn.q_proj
    want = layer.base_layer.weight + (layer.lora_B["default"].weight @ layer.lora_A["default"].weight) * (8 / 4)
    torch.testing.assert_close(model.model.layers[0].self_attn.q_proj.weight, want)
    assert not any("lora" in n for n, _ in model.named_parameters())


def test_the_tokenizer_says_which_format_the_model_was_trained_on(trained):
    _, tok = load_model_ref(str(trained))
    prompt = tool_prompt_for(tok)
    assert prompt.mode == "prompted" and prompt.parser.name == "pythonic"
    assert tool_prompt_for(tok, parser="hermes").parser.name == "hermes"  # an explicit choice still wins


def test_the_fingerprint_covers_the_adapter_and_its_base(trained):
    names = [f.name for f in model_files(str(trained))]
    assert names[:3] == ["adapter_config.json", "adapter_model.safetensors", "finetune.json"]


def test_an_adapter_trained_on_other_base_weights_is_refused(trained, tmp_path):
    other = shutil.copytree(trained, tmp_path / "other")
    info = json.loads((other / "finetune.json").read_text())
    info["base_fingerprint"] = "0" * 64
    (other / "finetune.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="was trained on base 'tiny:llama' with weight fingerprint 0000"):
        load_model_ref(str(other))


def test_an_adapter_that_does_not_fit_its_named_base_is_refused(trained, tmp_path):
    other = shutil.copytree(trained, tmp_path / "mismatch")
    info = json.loads((other / "finetune.json").read_text())
    info["config"]["base"] = "tiny:phi3"  # fused qkv_proj: no q_proj to take the adapter
    info.pop("base_fingerprint")
    (other / "finetune.json").write_text(json.dumps(info))
    with pytest.raises(ValueError, match="does not fit base 'tiny:phi3'"):
        load_model_ref(str(other))


def test_an_incomplete_fine_tune_folder_says_what_is_missing(trained, tmp_path):
    other = shutil.copytree(trained, tmp_path / "partial")
    (other / "finetune.json").unlink()
    assert "lacks finetune.json" in check_model_ref(str(other))
