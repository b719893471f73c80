"""The in-place growing cache layer stores exactly what transformers' DynamicLayer stores."""

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

import qdrift
from qdrift.backends.growing_cache import GrowingLayer, growing_cache
from qdrift.tiny import tiny_model


def states(n: int, seed: int, batch: int = 2, heads: int = 3, dim: int = 4) -> torch.Tensor:
    return torch.randn(batch, heads, n, dim, generator=torch.Generator().manual_seed(seed))


def test_appends_match_concatenation_across_regrowth():
    grow, ref = GrowingLayer(), DynamicLayer()
    grow.min_capacity = 4
    for i, n in enumerate([3, 1, 1, 5, 1, 9, 2]):  # capacity 4 -> 6 -> 10 -> 15 -> 22
        k, v = states(n, 2 * i), states(n, 2 * i + 1)
        gk, gv = grow.update(k, v)
        rk, rv = ref.update(k, v)
        assert torch.equal(gk, rk) and torch.equal(gv, rv)
    assert grow.get_seq_length() == ref.get_seq_length() == 22
    assert grow._kbuf.shape[-2] == 22, "capacity grows by half (or to what is needed), so copies are amortized"


def test_writes_after_a_crop_or_batch_select_continue_from_the_new_states():
    grow, ref = GrowingLayer(), DynamicLayer()
    for layer in (grow, ref):
        layer.update(states(6, 0), states(6, 1))
        layer.crop(-2)
        layer.batch_select_indices(torch.tensor([1]))
    gk, _ = grow.update(states(3, 2, batch=1), states(3, 3, batch=1))
    rk, _ = ref.update(states(3, 2, batch=1), states(3, 3, batch=1))
    assert torch.equal(gk, rk) and grow.get_seq_length() == 7


def test_model_logits_match_the_default_cache_over_many_decode_steps():
    model = tiny_model("llama")
    ids = torch.randint(1, 256, (1, 40), generator=torch.Generator().manual_seed(0))
    outs = []
    for cache in (growing_cache(model.config), DynamicCache(config=model.config)):
        with torch.no_grad():
            logits = [model(ids[:, :20], cache=cache).logits[:, -1]]
            logits += [model(ids[:, i:i + 1], cache=cache).logits[:, -1] for i in range(20, 40)]
        outs.append(torch.cat(logits))
    assert isinstance(growing_cache(model.config).layers[0], GrowingLayer)
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def test_kv_quantization_with_a_window_converts_it_and_quantizes_the_buffer():
    # Tokens leaving the full-precision window are quantized in place in the returned states.
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:fp8e4m3@unit-win4")
    ids = torch.randint(1, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    cache = growing_cache(model.config)
    with torch.no_grad():
        for i in range(12):
            model(ids[:, i:i + 1], cache=cache)
    keys = cache.layers[0].keys
    old, recent = keys[:, :, :8], keys[:, :, 8:]
    assert torch.equal(old, old.to(torch.float8_e4m3fn).float())
    assert not torch.equal(recent, recent.to(torch.float8_e4m3fn).float())
    assert torch.equal(keys, cache.layers[0]._kbuf[:, :, :12])
