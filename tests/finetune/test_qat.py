"""QAT-LoRA computes, in training, what post-training quantization of the merged model computes."""

import copy

import torch

import qdrift
from qdrift.finetune.train import build_model
from tests.finetune.conftest import tiny_config


def test_the_qat_forward_is_the_merged_weight_quantized_by_the_spec():
    model, _, _ = build_model(tiny_config(qat="w4g16"))
    with torch.no_grad():  # a nonzero adapter, so the merge matters
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ids = torch.randint(0, 100, (1, 12), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        qat_logits = model(input_ids=ids).logits
    plain, _, _ = build_model(tiny_config())
    plain.load_state_dict(model.state_dict())
    merged = plain.merge_and_unload().eval()
    with torch.no_grad():
        float_logits = merged(input_ids=ids).logits
        ptq = qdrift.quantize(copy.deepcopy(merged), "w4g16-a16-kv:16")
        ptq_logits = ptq(input_ids=ids).logits
    assert not torch.allclose(float_logits, ptq_logits, atol=1e-3)  # int4 moves the logits
    torch.testing.assert_close(qat_logits, ptq_logits, atol=1e-4, rtol=1e-4)


def test_gradients_pass_straight_through_to_the_adapter():
    model, _, _ = build_model(tiny_config(qat="w4g16"))
    ids = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(1))
    model(input_ids=ids).logits.sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if "lora_" in n]
    assert grads and all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
