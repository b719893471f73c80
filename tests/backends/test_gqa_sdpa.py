"""Shared key/value heads under a mask: bit-identical to transformers' SDPA, and only where it applies."""

from types import SimpleNamespace

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import qdrift
from qdrift.backends import gqa_sdpa
from qdrift.backends.gqa_sdpa import NAME, applies_to, sdpa_gqa_attention, shared_kv_heads
from qdrift.backends.session import BatchSession
from qdrift.organism import load_organism
from qdrift.tiny import tiny_model


def qkv(batch, heads, kv_heads, q, kv, dim=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, heads, q, dim, generator=g), torch.randn(batch, kv_heads, kv, dim, generator=g),
            torch.randn(batch, kv_heads, kv, dim, generator=g))


def padded_causal_mask(batch, q, kv, pads):
    """A runner-style boolean mask [B, 1, q, kv]: causal over the new tokens, each row's left padding masked."""
    causal = torch.ones(q, kv, dtype=torch.bool).tril(kv - q)
    mask = causal.expand(batch, 1, q, kv).clone()
    for row, pad in enumerate(pads):
        mask[row, :, :, :pad] = False
    return mask


@pytest.mark.parametrize("batch, heads, kv_heads, q, kv, pads", [
    (2, 4, 2, 5, 9, [0, 3]),
    (8, 8, 4, 10, 300, [0, 7, 50, 0, 1, 2, 3, 100]),
    (3, 9, 3, 4, 40, [5, 0, 0]),  # three query heads per key/value head, as in SmolLM2
    (1, 8, 1, 7, 7, [0]),  # one key/value head for all
])
@pytest.mark.parametrize("float_mask", [False, True])
def test_masked_multi_token_attention_is_bit_identical_to_transformers(batch, heads, kv_heads, q, kv, pads,
                                                                       float_mask):
    query, key, value = qkv(batch, heads, kv_heads, q, kv)
    mask = padded_causal_mask(batch, q, kv, pads)
    if float_mask:
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    module = SimpleNamespace(num_key_value_groups=heads // kv_heads, is_causal=True)
    ours, _ = sdpa_gqa_attention(module, query, key, value, mask, scaling=0.3)
    theirs, _ = sdpa_attention_forward(module, query, key, value, mask, scaling=0.3)
    assert ours.shape == theirs.shape == (batch, q, heads, query.shape[-1])
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("case, q, groups, masked", [
    ("one-token decode step", 1, 2, True),
    ("no mask", 6, 2, False),
    ("one query head per key/value head", 6, 1, True),
])
def test_every_other_call_goes_to_transformers_unchanged(monkeypatch, case, q, groups, masked):
    calls = []
    monkeypatch.setattr(gqa_sdpa, "sdpa_attention_forward", lambda *a, **k: calls.append(k) or ("theirs", None))
    query, key, value = qkv(2, 4, 4 // groups, q, 8)
    mask = padded_causal_mask(2, q, 8, [0, 2]) if masked else None
    out, _ = sdpa_gqa_attention(SimpleNamespace(num_key_value_groups=groups), query, key, value, mask)
    assert out == "theirs" and len(calls) == 1, case


def test_the_replaced_branch_does_not_call_transformers(monkeypatch):
    monkeypatch.setattr(gqa_sdpa, "sdpa_attention_forward", lambda *a, **k: pytest.fail("delegated"))
    query, key, value = qkv(2, 4, 2, 3, 8)
    out, _ = sdpa_gqa_attention(SimpleNamespace(num_key_value_groups=2), query, key, value,
                                padded_causal_mask(2, 3, 8, [0, 4]))
    assert out.shape == (2, 3, 4, 16)


def counting(monkeypatch) -> list[int]:
    """Count the forwards that reach the shared-head function (query length of each call)."""
    seen: list[int] = []

    def wrapper(module, query, *args, **kwargs):
        seen.append(query.shape[2])
        return sdpa_gqa_attention(module, query, *args, **kwargs)

    monkeypatch.setitem(AttentionInterface._global_mapping, NAME, wrapper)
    return seen


def feeds(session: BatchSession) -> list[torch.Tensor]:
    """A runner's pattern: ragged prompts, decode steps, ragged tool results, a row left out."""
    g = torch.Generator().manual_seed(3)
    ids = lambda n: torch.randint(5, 150, (n,), generator=g).tolist()  # noqa: E731
    out = [session.feed([ids(30), ids(12), ids(21)])]
    for _ in range(3):
        out.append(session.feed([ids(1), ids(1), ids(1)]))
    out.append(session.feed([ids(6), None, ids(2)]))
    out.append(session.feed([ids(1), ids(9), ids(1)]))
    return out


@pytest.mark.parametrize("spec, paged", [(None, False), ("w8-a16-kv:fp8e4m3@unit", False), (None, True)])
def test_a_session_computes_the_same_logits_with_shared_heads(monkeypatch, spec, paged):
    model, _ = load_organism()
    if spec:
        model = qdrift.quantize(model, spec)
    assert applies_to(model)
    seen = counting(monkeypatch)
    shared = BatchSession(model, 3, pad_id=0, paged=paged)
    assert shared.share_kv_heads
    with_shared = feeds(shared)
    assert seen and max(seen) > 1  # the multi-token feeds went through it
    assert model.config._attn_implementation == "sdpa"  # restored after every forward
    seen.clear()
    plain = BatchSession(model, 3, pad_id=0, paged=paged)
    plain.share_kv_heads = False
    without = feeds(plain)
    assert not seen
    for a, b in zip(with_shared, without, strict=True):
        assert torch.equal(a, b)


def test_the_model_is_restored_when_a_forward_fails():
    model, _ = load_organism()
    session = BatchSession(model, 1, pad_id=0)
    with pytest.raises(IndexError):
        session.feed([[10**6]])  # past the vocabulary
    assert model.config._attn_implementation == "sdpa"


def test_it_applies_only_to_sdpa_models_on_the_cpu():
    model = tiny_model("llama")
    assert model.config._attn_implementation == "eager" and not applies_to(model)
    model.set_attn_implementation("sdpa")
    assert applies_to(model)
    elsewhere = tiny_model("llama")
    elsewhere.set_attn_implementation("sdpa")
    assert not applies_to(elsewhere.to("meta"))  # weights off the CPU
    with shared_kv_heads(model, enabled=False):
        assert model.config._attn_implementation == "sdpa"
    with shared_kv_heads(model):
        assert model.config._attn_implementation == NAME
    assert model.config._attn_implementation == "sdpa"
