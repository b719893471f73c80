import pytest
import torch

from qdrift.real.parity import parity
from qdrift.tiny import tiny_model

from .conftest import prompt


def test_dequant_path_report_shows_no_divergence():
    report = parity(tiny_model("llama"), "w4g32-a16-kv:16", prompt())
    assert report.real.path == "real" and report.real.backend == "dequant-matmul"
    assert report.fake.path == "fake" and report.fake.backend == "fake-quant"
    assert len(report.layers) == 14
    assert report.top1_flips == 0 and report.max_logit_error == 0 and report.kl_mean == 0
    assert all(r.max_abs == 0 for r in report.layers)


def test_fused_bf16_kernel_divergence_is_measured_per_layer_and_end_to_end():
    model = tiny_model("llama", dtype=torch.bfloat16)
    report = parity(model, "w4g128z-a16-kv:16", prompt(), kernel="fused")
    assert report.real.backend.startswith("tinygemm-int4") and report.real.dtype == "bfloat16"
    assert all(0 < r.rel < 0.05 for r in report.layers), [r.rel for r in report.layers]
    assert 0 < report.max_logit_error < 0.1 and report.kl_mean >= 0
    text = report.render()
    assert "KL(fake||real)" in text and "top-1 flips" in text and "tinygemm" in text
    assert report.to_dict()["real"]["tp_size"] == 1


def test_parity_leaves_the_model_unquantized():
    model = tiny_model("llama")
    before = model.model.layers[0].mlp.up_proj.weight.clone()
    parity(model, "w8-a16-kv:16", prompt())
    assert torch.equal(model.model.layers[0].mlp.up_proj.weight, before)


def test_unsupported_spec_is_refused_before_any_work():
    with pytest.raises(ValueError, match="cannot run on the real path"):
        parity(tiny_model("llama"), "w4g32-a8-kv:16", prompt())
