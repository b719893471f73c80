"""The paged cache computes what DynamicCache computes, and every injected page fault aborts only its row."""

import pytest
import torch

from qdrift.backends.paged import FAULTS, PageIntegrityError
from qdrift.backends.session import BatchSession
from qdrift.tiny import tiny_model

B = 4
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14], [15, 16, 17, 18, 19, 20, 21, 22, 23, 24], [25, 26]]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return tiny_model("llama", dtype=torch.float32).eval()


def run(model, paged, fault=None, new_tokens=12):
    s = BatchSession(model, B, pad_id=0, paged=paged, page_size=4)
    logits = s.feed(PROMPTS)
    first = logits.clone()
    if fault:
        s.cache.pool.inject(**fault)
    outs = s.generate(logits, list(range(B)), max_new_tokens=new_tokens, eos_ids=set(), stop_check=lambda r, i: False)
    return first, outs


def test_paged_cache_matches_dynamic_cache(model):
    ref_logits, ref = run(model, paged=False)
    logits, out = run(model, paged=True)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    assert [out[r].token_ids for r in range(B)] == [ref[r].token_ids for r in range(B)]
    assert all(out[r].stop_reason == "max_new_tokens" for r in range(B))


@pytest.mark.parametrize("kind", FAULTS)
def test_each_fault_aborts_the_faulted_rows_and_the_others_are_unchanged(model, kind):
    _, clean = run(model, paged=True)
    fault = {"kind": kind, "row": 1, "page_index": 0, "other": None if kind == "stale_generation" else 2}
    _, out = run(model, paged=True, fault=fault)
    faulted = {1, 2} if kind == "swap" else {1}
    for r in range(B):
        if r in faulted:
            assert out[r].stop_reason == "kv_integrity"
            assert f"request {r}" in out[r].error and "page 0" in out[r].error
        else:
            assert out[r].token_ids == clean[r].token_ids and out[r].stop_reason == "max_new_tokens"


def test_verify_names_expected_and_found_tags(model):
    s = BatchSession(model, B, pad_id=0, paged=True, page_size=4)
    s.feed(PROMPTS)
    s.cache.pool.inject("reassign", row=3, page_index=1, other=0)
    with pytest.raises(PageIntegrityError, match=r"request 3: its page 1 .* \(3, 1, 1\), found \(0, 1, 2\)"):
        s.cache.pool.verify()


def test_unchecked_cache_does_not_detect(model):
    s = BatchSession(model, B, pad_id=0, paged=True, page_size=4, check_pages=False)
    s.feed(PROMPTS)
    s.cache.pool.inject("swap", row=0, page_index=0, other=1)
    s.cache.pool.verify()  # no check, no error: the flag really switches the check off


def test_unknown_fault_lists_the_valid_ones(model):
    s = BatchSession(model, B, pad_id=0, paged=True)
    s.feed(PROMPTS)
    with pytest.raises(ValueError, match="Valid: reassign"):
        s.cache.pool.inject("scramble", row=0)


@pytest.mark.parametrize("row,other", [(1, 0), (0, 2), (3, 1), (2, 3)])
def test_a_row_aliasing_another_rows_current_page_never_writes_into_it(model, row, other):
    """The aborted row's table points at the healthy row's page being filled: were its padding still
    written through that table, the healthy row would read another row's keys at its own positions."""
    _, clean = run(model, paged=True)
    current = (max(map(len, PROMPTS)) - 1) // 4  # the page the next tokens go to (page_size 4)
    _, out = run(model, paged=True, fault={"kind": "alias", "row": row, "page_index": current, "other": other})
    assert out[row].stop_reason == "kv_integrity" and f"request {row}" in out[row].error
    for r in set(range(B)) - {row}:
        assert out[r].token_ids == clean[r].token_ids
        assert out[r].logprobs == clean[r].logprobs  # bit-identical, not close
        assert out[r].stop_reason == "max_new_tokens"
