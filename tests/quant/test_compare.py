"""Logit comparisons against scipy's elementwise KL."""

import math

import numpy as np
import pytest
import torch
from scipy.special import log_softmax, rel_entr

from qdrift.quant.compare import compare_logits


def test_kl_and_agreement_match_scipy():
    rng = np.random.default_rng(0)
    base, quant = rng.normal(size=(3, 5, 40)), rng.normal(size=(3, 5, 40))
    got = compare_logits(torch.tensor(base, dtype=torch.float32), torch.tensor(quant, dtype=torch.float32))
    ref = rel_entr(np.exp(log_softmax(base, -1)), np.exp(log_softmax(quant, -1))).sum(-1)
    assert got.kl_mean == pytest.approx(ref.mean(), rel=1e-5) and got.kl_max == pytest.approx(ref.max(), rel=1e-5)
    assert got.top1_agreement == pytest.approx((base.argmax(-1) == quant.argmax(-1)).mean())


def test_a_token_both_rule_out_adds_nothing_instead_of_making_everything_nan():
    base = torch.tensor([2.0, 1.0, -math.inf, 0.5])
    quant = torch.tensor([1.0, 2.0, -math.inf, 0.0])
    got = compare_logits(base, quant)
    ref = rel_entr(np.exp(log_softmax(base.numpy().astype(float))), np.exp(log_softmax(quant.numpy().astype(float))))
    assert got.kl_mean == pytest.approx(ref.sum(), rel=1e-9) and got.max_abs == 1.0
    only_quant = compare_logits(torch.tensor([1.0, 0.0]), torch.tensor([-math.inf, 0.0]))
    assert only_quant.kl_mean == math.inf  # the quantized model rules out a token the baseline can emit
