"""Batched incremental decoding computes, row by row, what each conversation computes alone."""

import pytest
import torch

import qdrift
from qdrift.backends.session import BatchSession
from qdrift.tiny import tiny_model


def ids(n: int, seed: int) -> list[int]:
    return torch.randint(1, 256, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def alone(model, parts: list[list[int]]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([sum(parts, [])])).logits[0, -1]


def greedy_reference(model, prompt: list[int], n: int) -> list[int]:
    """n greedy tokens after `prompt`, by transformers' own generate()."""
    with torch.no_grad():
        return model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)[0, len(prompt):].tolist()


def never(row, token_ids) -> bool:
    return False


def test_rows_with_ragged_chunks_match_single_sequences():
    model = tiny_model("llama")
    a1, a2, b1, b2 = ids(5, 0), ids(2, 1), ids(3, 2), ids(6, 3)
    s = BatchSession(model, 2, pad_id=0)
    s.feed([a1, b1])
    logits = s.feed([a2, b2])
    torch.testing.assert_close(logits[0], alone(model, [a1, a2]), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits[1], alone(model, [b1, b2]), rtol=1e-4, atol=1e-5)


def test_a_row_without_new_tokens_is_left_unchanged():
    model = tiny_model("llama")
    a1, b1, b2, a2 = ids(4, 0), ids(4, 1), ids(3, 2), ids(2, 3)
    s = BatchSession(model, 2, pad_id=0)
    s.feed([a1, b1])
    s.feed([None, b2])  # row 0 idles (e.g. its episode is waiting)
    logits = s.feed([a2, None])
    torch.testing.assert_close(logits[0], alone(model, [a1, a2]), rtol=1e-4, atol=1e-5)


def test_greedy_generation_matches_transformers_generate():
    model = tiny_model("llama")
    prompt = ids(7, 5)
    ref = greedy_reference(model, prompt, 6)
    s = BatchSession(model, 1, pad_id=0)
    out = s.generate(s.feed([prompt]), [0], max_new_tokens=6, eos_ids=set(), stop_check=never)
    assert out[0].token_ids == ref
    assert s.tokens_fed == 7 + 5, "the turn's last token is not run until something follows it"
    assert s.unfed == [ref[-1:]]


def test_the_last_token_of_a_turn_goes_in_front_of_the_next_feed():
    model = tiny_model("llama")
    prompt, more = ids(7, 5), ids(3, 6)
    s = BatchSession(model, 1, pad_id=0)
    out = s.generate(s.feed([prompt]), [0], max_new_tokens=4, eos_ids=set(), stop_check=never)
    logits = s.feed([more])
    assert s.unfed == [[]] and s.tokens_fed == 7 + 4 + 3
    torch.testing.assert_close(logits[0], alone(model, [prompt, out[0].token_ids, more]), rtol=1e-4, atol=1e-5)


def test_a_row_that_stops_first_keeps_its_last_token_while_the_others_decode():
    # Its waiting token must enter with its own next feed (as alone), not with another row's decode step.
    model = tiny_model("llama")
    a, b, more = ids(5, 0), ids(4, 1), ids(3, 2)
    s = BatchSession(model, 2, pad_id=0)
    out = s.generate(s.feed([a, b]), [0, 1], max_new_tokens=5, eos_ids=set(),
                     stop_check=lambda r, t: r == 0 and len(t) == 2)
    assert [len(out[r].token_ids) for r in (0, 1)] == [2, 5]
    assert s.unfed == [out[0].token_ids[-1:], out[1].token_ids[-1:]]
    assert s.tokens_fed == 5 + 4 + 1 + 4
    logits = s.feed([more, None])
    torch.testing.assert_close(logits[0], alone(model, [a, out[0].token_ids, more]), rtol=1e-4, atol=1e-5)
    assert s.unfed[1] == out[1].token_ids[-1:]


def test_generating_again_without_a_feed_first_runs_the_waiting_token():
    model = tiny_model("llama")
    prompt = ids(7, 5)
    ref = greedy_reference(model, prompt, 6)
    s = BatchSession(model, 1, pad_id=0)
    first = s.generate(s.feed([prompt]), [0], max_new_tokens=3, eos_ids=set(), stop_check=never)
    second = s.generate(s.last_logits, [0], max_new_tokens=3, eos_ids=set(), stop_check=never)
    assert first[0].token_ids + second[0].token_ids == ref


def test_quantized_model_cache_is_quantized_in_the_session():
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:fp8e4m3@unit")
    s = BatchSession(model, 2, pad_id=0)
    s.feed([ids(4, 0), ids(2, 1)])
    keys = s.cache.layers[0].keys
    assert torch.equal(keys, keys.to(torch.float8_e4m3fn).float())


def test_a_row_fed_nothing_keeps_its_own_logits():
    model = tiny_model("llama")
    a, b1, b2 = ids(5, 0), ids(4, 1), ids(3, 2)
    s = BatchSession(model, 2, pad_id=0)
    s.feed([a, b1])
    logits = s.feed([None, b2])  # row 0 gets only padding in this forward
    torch.testing.assert_close(logits[0], alone(model, [a]), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits[1], alone(model, [b1, b2]), rtol=1e-4, atol=1e-5)


class FullLogitsOnly(torch.nn.Module):
    """A causal LM whose forward has no `logits_to_keep` (older or custom architectures)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, input_ids, attention_mask, position_ids, cache, use_cache):
        return self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                          cache=cache, use_cache=use_cache)


def test_logits_of_last_positions_only_match_full_logits_and_models_without_the_option():
    model = tiny_model("llama")
    a1, a2, b1, b2 = ids(6, 7), ids(3, 8), ids(2, 9), ids(5, 10)
    kept, full = BatchSession(model, 2, pad_id=0), BatchSession(FullLogitsOnly(model), 2, pad_id=0)
    assert kept.keep_logits and not full.keep_logits
    for chunks in ([a1, b1], [a2, b2], [None, [7]]):
        torch.testing.assert_close(kept.feed(chunks), full.feed(chunks), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(kept.last_logits[0], alone(model, [a1, a2]), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("spec", ["w16-a16-k:4c4@dyn-v:16", "w16-a16-kv:4@dyn-win4", "w16-a16-kv:fp8e4m3@unit-win3"])
def test_a_spec_that_defers_kv_quantization_gives_each_padded_row_what_it_gives_alone(spec):
    # Token blocks and the full-precision window count each row's real tokens: counted over the padded
    # columns, a row's blocks and window moved with its neighbours' lengths (up to 0.0016, 0.094 and 0.026
    # in a logit here, in the order of the specs).
    model = qdrift.quantize(tiny_model("llama"), spec)
    feeds = [[ids(5, 0), ids(3, 1), None, ids(2, 2), [9], [10], [11]],
             [ids(2, 3), None, ids(7, 4), ids(1, 5), [12], None, [13]],
             [ids(9, 6), ids(1, 7), ids(1, 8), None, None, [14], [15]]]
    batched = BatchSession(model, 3, pad_id=0)
    together = [batched.feed(list(chunks)) for chunks in zip(*feeds, strict=True)]
    for row, chunks in enumerate(feeds):
        single = BatchSession(model, 1, pad_id=0)
        for step, chunk in enumerate(chunks):
            if chunk is not None:
                torch.testing.assert_close(together[step][row], single.feed([chunk])[0], rtol=1e-4, atol=1e-5)
        for a, b in zip(single.cache.layers, batched.cache.layers, strict=True):
            assert [p[0] for p in a._qdrift_pending] == [p[row] for p in b._qdrift_pending]


def test_a_spec_that_defers_kv_quantization_is_refused_in_pages():
    for spec in ("w16-a16-k:4c4@dyn-v:16", "w16-a16-kv:4@dyn-win4"):
        model = qdrift.quantize(tiny_model("llama"), spec)
        with pytest.raises(ValueError, match="never reach the pages"):
            BatchSession(model, 1, pad_id=0, paged=True)
    BatchSession(qdrift.quantize(tiny_model("llama"), "w16-a16-kv:4@dyn"), 2, pad_id=0, paged=True)  # per token: fine


def sliding_mistral():
    from transformers import AutoModelForCausalLM

    from qdrift.tiny import tiny_config

    config = tiny_config("mistral")
    config.sliding_window = 16  # every layer sliding: the model takes one mask, not a dict by kind
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("make", [lambda: tiny_model("gemma2"), lambda: tiny_model("gemma3"), sliding_mistral],
                         ids=["gemma2-eager", "gemma3-eager", "mistral-sdpa"])
def test_padded_rows_of_a_sliding_window_model_see_their_own_window_beyond_its_width(make, paged):
    # transformers keeps and masks a sliding window by column; padding takes columns, so a padded row lost
    # tokens inside its own window (the paged cache did so silently, up to 1.0 in a logit here).
    model = make()
    window = model.config.sliding_window
    feeds = [[ids(20, 0), ids(3, 1), None, ids(9, 2), [9], [10], [11], ids(12, 9)],
             [ids(2, 3), None, ids(7, 4), ids(1, 5), [12], None, [13], ids(3, 10)],
             [ids(9, 6), ids(1, 7), ids(1, 8), None, None, [14], [15], None]]
    batched = BatchSession(model, 3, pad_id=0, paged=paged)
    together = [batched.feed(list(chunks)) for chunks in zip(*feeds, strict=True)]
    assert batched.mask.shape[1] > 3 * window and not bool(batched.mask.all())
    for row, chunks in enumerate(feeds):
        single = BatchSession(model, 1, pad_id=0)  # transformers' own sliding cache and masks
        for step, chunk in enumerate(chunks):
            if chunk is not None:
                torch.testing.assert_close(together[step][row], single.feed([chunk])[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
@pytest.mark.parametrize("spec", ["w16-a16-k:4c32@dyn-v:16", "w16-a16-k:4c8@dyn-v:4@dyn-win12"])
def test_a_deferred_kv_spec_on_a_sliding_window_model_quantizes_alike_at_any_batch(arch, spec):
    # A sliding layer drops tokens before a 32-token block completes (its keys were never quantized) or
    # before a window passes them: under such specs every layer keeps every token, whatever the batch,
    # and a plain forward loop over transformers' DynamicCache (as generate() runs) agrees. Before, the
    # batch of 3 kept whole layers and batch 1 sliding ones: 0.0022-0.077 apart in a logit.
    from transformers import DynamicCache

    model = qdrift.quantize(tiny_model(arch), spec)
    row = [ids(20, 1)] + [[t] for t in ids(40, 2)]
    others = [[ids(7, 5)] + [[t] for t in ids(40, 6)], [ids(25, 7)] + [[t] for t in ids(40, 8)]]
    cache = DynamicCache(config=model.config)
    single, batched = BatchSession(model, 1, pad_id=0), BatchSession(model, 3, pad_id=0)
    for i, chunk in enumerate(row):
        reference = model(torch.tensor([chunk]), cache=cache, use_cache=True).logits[0, -1]
        torch.testing.assert_close(single.feed([chunk])[0], reference, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(batched.feed([chunk, others[0][i], others[1][i]])[0], reference, rtol=1e-4, atol=1e-5)
    assert not any(getattr(layer, "is_sliding", False) for layer in cache.layers)


def test_padding_beyond_a_sliding_window_is_refused_where_per_row_masks_cannot_stand_in(monkeypatch):
    from qdrift.backends import row_masks

    monkeypatch.setattr(row_masks, "IMPLEMENTATIONS", ("sdpa",))  # as if eager attention took no ready masks
    model = tiny_model("gemma2")
    window = model.config.sliding_window
    p = ids(window + 4, 7)
    s = BatchSession(model, 2, pad_id=0)
    s.feed([p[:window], p[:3]])  # within the window: padding takes no real token out of it
    with pytest.raises(ValueError, match="beyond the model's sliding window.*'eager' attention"):
        s.feed([p[window:], p[3:]])  # row 1 padded, and the cache now wider than the window
    alone_session = BatchSession(model, 1, pad_id=0)  # one row has no padding: past the window is fine
    torch.testing.assert_close(alone_session.feed([p])[0], alone(model, [p]), rtol=1e-4, atol=1e-5)


def test_a_row_never_fed_cannot_generate():

    s = BatchSession(tiny_model("llama"), 2, pad_id=0)
    logits = s.feed([ids(4, 0), None])
    with pytest.raises(ValueError, match="rows \\[1\\] were never fed"):
        s.generate(logits, [0, 1], max_new_tokens=2, eos_ids=set(), stop_check=never)


def test_a_fed_row_is_prefill_whatever_the_width_its_batch_mates_give_the_forward():
    # With separate prefill and decode precision, a one-token prompt ran as decode alone and as prefill
    # beside a longer one; a fed token is prefill either way, a generated one decode.
    model = qdrift.quantize(tiny_model("llama"), "w8/4-a16-kv:16")
    one, wide = ids(1, 3), ids(5, 4)
    together = BatchSession(model, 2, pad_id=0).feed([wide, one])[1]
    alone_ = BatchSession(model, 1, pad_id=0).feed([one])[0]
    torch.testing.assert_close(together, alone_, rtol=1e-4, atol=1e-5)  # batched sums round alike, not bit-equal
    prefill = qdrift.quantize(tiny_model("llama"), "w8-a16-kv:16")  # the prefill precision on its own
    torch.testing.assert_close(alone_, BatchSession(prefill, 1, pad_id=0).feed([one])[0], rtol=0, atol=0)
