"""Per-row window masks are transformers' own masks wherever a row has no padding."""

import torch
from transformers import DynamicCache
from transformers.masking_utils import create_causal_mask, create_sliding_window_causal_mask

from qdrift.backends.row_masks import row_masks, sliding_kinds, unsupported
from qdrift.tiny import tiny_model


def test_without_padding_the_masks_are_transformers_own_for_both_kinds():
    model = tiny_model("gemma2")
    kinds = sliding_kinds(model)
    assert kinds == {"sliding_attention": model.config.sliding_window, "full_attention": None}
    past, width = 21, 6  # a query block after 21 cached tokens, the window 16 columns wide
    real = torch.ones(2, past + width, dtype=torch.bool)
    positions = torch.arange(past, past + width).expand(2, -1)
    ours = row_masks(model, kinds, real, positions)
    assert set(ours) == set(kinds)
    embeds = torch.zeros(2, width, model.config.hidden_size)
    cache = DynamicCache(config=model.config)  # transformers' own: the sliding layer keeps window - 1 columns
    config = model.config
    for layer in cache.layers:
        states = torch.zeros(2, config.num_key_value_heads, past, config.head_dim)
        layer.update(states, states)
    common = dict(config=config, inputs_embeds=embeds, attention_mask=torch.ones(2, past + width, dtype=torch.long),
                  cache=cache, position_ids=positions)
    full = create_causal_mask(**common)
    assert torch.equal(ours["full_attention"], full)
    sliding = create_sliding_window_causal_mask(**common)  # over the last window - 1 + width columns only
    kept = sliding.shape[-1]
    assert kept == kinds["sliding_attention"] - 1 + width
    assert torch.equal(ours["sliding_attention"][..., -kept:], sliding)
    assert bool((ours["sliding_attention"][..., :-kept] == torch.finfo(model.dtype).min).all())


def test_a_padded_rows_window_counts_its_own_tokens():
    model = tiny_model("gemma2")
    window = model.config.sliding_window
    # Row 1's real tokens sit at every other column: 2 * window columns hold `window` of its tokens.
    real = torch.ones(2, 2 * window + 1, dtype=torch.bool)
    real[1, 1::2] = False
    last = int(real[1].sum()) - 1
    sliding = row_masks(model, {"sliding_attention": window}, real, torch.tensor([[2 * window], [last]]))
    assert sliding.dtype == model.dtype  # eager attention: an additive float mask
    seen = sliding[:, 0, 0] == 0
    assert int(seen[0].sum()) == window and int(seen[1].sum()) == window  # by columns row 1 would see window/2
    assert not seen[1][~real[1]].any()


def test_other_attention_kinds_are_named():
    model = tiny_model("gemma2")
    assert unsupported(model, {"sliding_attention": 16, "chunked_attention": 8}) == (
        "its layers include chunked_attention, which per-row masks do not reproduce")
    assert unsupported(model, sliding_kinds(model)) is None
    assert sliding_kinds(tiny_model("llama")) is None


def test_a_chunked_attention_model_keeps_the_refusal_of_padding_past_its_chunk():
    # Chunked layers (Llama 4) are windows too: their kind is found, and named as one per-row masks skip.
    from transformers import AutoModelForCausalLM

    from qdrift.tiny import tiny_config

    config = tiny_config("llama")
    config.attention_chunk_size = 8
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    assert sliding_kinds(model) == {"chunked_attention": 8}
    assert "chunked_attention" in unsupported(model, sliding_kinds(model))


def test_a_model_that_takes_one_mask_for_layers_of_two_kinds_is_named():
    # A Mistral config may list alternating layer kinds, but MistralModel takes a single mask: a dict of
    # masks by kind crashed it.
    import transformers

    from qdrift.tiny import COMMON

    config = transformers.MistralConfig(**COMMON, head_dim=32, sliding_window=16,
                                        layer_types=["sliding_attention", "full_attention"])
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").eval()
    assert "forward takes one mask" in unsupported(model, sliding_kinds(model))
    assert unsupported(tiny_model("gemma2"), sliding_kinds(tiny_model("gemma2"))) is None


def test_layers_of_one_kind_with_different_windows_are_named(monkeypatch):
    from qdrift.backends import row_masks

    types = (["sliding_attention", "sliding_attention"], [{"sliding_window": 16}, {"sliding_window": 32}])
    monkeypatch.setattr(row_masks, "get_layer_types_and_kwargs", lambda config: types)
    kinds = sliding_kinds(tiny_model("gemma2"))
    assert "sliding_attention with windows of several widths" in unsupported(tiny_model("gemma2"), kinds)
