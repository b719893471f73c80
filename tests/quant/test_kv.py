"""KV-cache quantization: each state quantized once, on write, checked against torch's float8 casts."""

import pytest
import torch
from transformers import DynamicCache

import qdrift
from qdrift.quant.kv import QuantizedKVLayerMixin
from qdrift.tiny import tiny_model

from .conftest import prompt


def fp8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    return x.float().clamp(-448, 448).to(torch.float8_e4m3fn).to(x.dtype)


def raw_layer0_keys(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    model = tiny_model("llama")
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
    return cache.layers[0].keys, cache.layers[0].values


def test_unit_scale_fp8_cache_matches_torch_cast_bit_for_bit():
    ids = prompt(n=10)
    raw_k, raw_v = raw_layer0_keys(ids)  # layer 0 states do not depend on earlier KV quantization
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:fp8e4m3@unit")
    with torch.no_grad():
        cache = model(ids, use_cache=True).cache
    assert torch.equal(cache.layers[0].keys, fp8_roundtrip(raw_k))
    assert torch.equal(cache.layers[0].values, fp8_roundtrip(raw_v))


def test_decode_steps_never_requantize_old_tokens():
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:4g32@dyn")
    ids = prompt(n=10, batch=1)
    calls = {"n": 0}
    quantizer = model._qdrift_state.kv[0].keys
    original = quantizer.qdq

    def counting(x):
        calls["n"] += x.shape[-2]
        return original(x)

    quantizer.qdq = counting
    with torch.no_grad():
        out = model(ids, use_cache=True)
        cache = out.cache
        before = cache.layers[1].keys.clone()
        tok = out.logits[:, -1:].argmax(-1)
        for _ in range(5):
            out = model(tok, cache=cache, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
    assert torch.equal(cache.layers[1].keys[:, :, :10], before)
    assert calls["n"] == 10 + 5, "layer-0 keys: each token quantized exactly once"


def test_full_precision_window_keeps_recent_tokens_exact():
    ids = prompt(n=12)
    raw_k, _ = raw_layer0_keys(ids)
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:fp8e4m3@unit-win4")
    with torch.no_grad():
        keys = model(ids, use_cache=True).cache.layers[0].keys
    assert torch.equal(keys[:, :, -4:], raw_k[:, :, -4:])
    assert torch.equal(keys[:, :, :-4], fp8_roundtrip(raw_k[:, :, :-4]))


def test_per_channel_dynamic_keys_wait_for_a_full_token_block():
    ids = prompt(n=13)
    raw_k, _ = raw_layer0_keys(ids)
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-k:4c4@dyn-v:16")
    with torch.no_grad():
        keys = model(ids, use_cache=True).cache.layers[0].keys
    assert torch.equal(keys[:, :, 12:], raw_k[:, :, 12:]), "the incomplete block stays in full precision"
    block = raw_k[:, :, 4:8]  # reference: symmetric int4 per channel over the 4 tokens of the block
    scale = block.abs().amax(dim=-2, keepdim=True) / 7
    ref = (block / scale).round().clamp(-7, 7) * scale
    torch.testing.assert_close(keys[:, :, 4:8], ref, rtol=1e-5, atol=1e-6)


def test_static_kv_scales_come_from_calibration():
    calib = [prompt(n=16, batch=1, seed=s) for s in range(3)]
    amax = max(raw_layer0_keys(c)[0].abs().max() for c in calib)
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:fp8e4m3@static", calibration=calib)
    scale = model._qdrift_state.kv[0].keys.scales.scale
    torch.testing.assert_close(scale.reshape(()), amax / 448)


def test_user_cache_and_generate_are_both_converted():
    model = qdrift.quantize(tiny_model("llama"), "w16-a16-kv:8@dyn")
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(prompt(), cache=cache, use_cache=True)
        out = model.generate(prompt(), max_new_tokens=3, do_sample=False, return_dict_in_generate=True)
    assert all(isinstance(layer, QuantizedKVLayerMixin) for layer in cache.layers)
    assert all(isinstance(layer, QuantizedKVLayerMixin) for layer in out.cache.layers)


def test_cache_already_filled_in_full_precision_is_refused():
    model = tiny_model("llama")
    with torch.no_grad():
        cache = model(prompt(), use_cache=True).cache
        qdrift.quantize(model, "w16-a16-kv:8@dyn")
        with pytest.raises(ValueError, match="already holds .* tokens written without KV quantization"):
            model(prompt(n=1), cache=cache, use_cache=True)


def test_sliding_window_layers_quantize_too():
    # Quantized on write, a sliding layer stays one; a spec that waits for token blocks or a window gets
    # a whole layer there (a sliding one dropped tokens before their block completed).
    for spec, kinds in (("w16-a16-kv:4@dyn", {"QDriftDynamicSlidingWindowLayer", "QDriftDynamicLayer"}),
                        ("w16-a16-k:4c8@dyn-v:4@dyn-win4", {"QDriftDynamicLayer"})):
        model = qdrift.quantize(tiny_model("gemma2"), spec)
        with torch.no_grad():
            out = model.generate(prompt(n=30), max_new_tokens=10, do_sample=False, return_dict_in_generate=True)
        assert {type(layer).__name__ for layer in out.cache.layers} == kinds


@pytest.mark.parametrize("fmt", ["fp8e4m3", "fp8e5m2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_unit_scale_fast_cast_equals_the_general_format_path(fmt, dtype, monkeypatch):
    from qdrift.formats import Scales
    from qdrift.quant.kv import KVTensorQuantizer
    from qdrift.spec import QuantSpec

    scheme = QuantSpec.parse(f"w16-a16-kv:{fmt}@unit").kv.keys
    q = KVTensorQuantizer(scheme, 0, "k")
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4000, generator=g) * s for s in (1e-3, 0.3, 30, 3e3, 1e5)])
    edges = [0.0, -0.0, 448.0, 449.0, 464.0, 480.0, -500.0, 57344.0, 61440.0, 2.0**-9, 2.0**-10, 2.0**-17,
             1.0, float("inf"), -float("inf"), float("nan")]
    x = torch.cat([x, torch.tensor(edges)]).to(dtype).reshape(1, 1, -1, 8)
    general = q.fmt.fake_quantize(x, scales=Scales(scale=torch.ones(())))

    def general_path(*args, **kwargs):
        raise AssertionError("a unit-scale fp8 write went through the general format path")

    monkeypatch.setattr(q.fmt, "fake_quantize", general_path)  # the registry's shared instance: undone after
    fast = q.qdq(x)
    assert fast.dtype == dtype
    assert torch.equal(fast.isnan(), general.isnan())
    assert torch.equal(fast.nan_to_num(), general.nan_to_num())


@pytest.mark.parametrize("spec", ["w16-a16-k:2c4z@dyn-v:16", "w16-a16-kv:fp8e4m3@unit-win4"])
def test_cropping_the_cache_never_requantizes_stored_tokens(spec):
    # Cropping removes the newest tokens, the pending (full-precision) ones first: what stays pending is
    # what was pending less what went. Counting already-quantized tokens as pending re-quantized them
    # at the next write (for c4 blocks, under a new block's scale mixed with new tokens).
    from qdrift.quant.kv import LayerKVQuantizer, convert_cache
    from qdrift.spec import QuantSpec

    torch.manual_seed(0)
    cache = DynamicCache()
    convert_cache(cache, [LayerKVQuantizer(QuantSpec.parse(spec).kv, 0)])
    layer = cache.layers[0]
    layer.update(torch.randn(1, 1, 6, 8), torch.randn(1, 1, 6, 8))  # c4: tokens 0-3 stored, 4-5 pending
    pending = layer._qdrift_pending
    layer.crop(-3)
    assert layer._qdrift_pending == tuple([max(0, p - 3) for p in ps] for ps in pending)
    kept = layer.keys[..., :3, :].clone(), layer.values[..., :3, :].clone()
    layer.update(torch.randn(1, 1, 2, 8), torch.randn(1, 1, 2, 8))
    assert torch.equal(layer.keys[..., :3, :], kept[0]) and torch.equal(layer.values[..., :3, :], kept[1])


def _deferred_layer(spec: str):
    from qdrift.quant.kv import LayerKVQuantizer, convert_cache
    from qdrift.spec import QuantSpec

    cache = DynamicCache()
    convert_cache(cache, [LayerKVQuantizer(QuantSpec.parse(spec).kv, 0)])
    return cache


@pytest.mark.parametrize("spec", ["w16-a16-k:2c4z@dyn-v:16", "w16-a16-kv:4@dyn-win3", "w16-a16-kv:fp8e4m3@unit-win2"])
def test_padded_rows_settle_their_own_tokens_as_they_would_alone(spec):
    # Two rows written together, padding between each row's tokens, against each row written alone:
    # the same tokens quantized, bit for bit, and the same ones still waiting.
    from qdrift.quant.kv import written_columns

    torch.manual_seed(0)
    lengths = [(5, 2), (1, 3), (0, 4), (3, 1), (2, 0), (1, 1)]  # per write, each row's real tokens
    rows = [[torch.randn(1, 2, n, 8) for n, _ in lengths], [torch.randn(1, 2, n, 8) for _, n in lengths]]
    batched = _deferred_layer(spec)
    alone = [_deferred_layer(spec), _deferred_layer(spec)]
    for i, (a, b) in enumerate(lengths):
        width = max(a, b)
        x = torch.zeros(2, 2, width, 8)
        x[0, :, :a], x[1, :, :b] = rows[0][i][0], rows[1][i][0]
        real = torch.arange(width)[None, :] < torch.tensor([a, b])[:, None]
        with written_columns(batched, real):
            batched.layers[0].update(x, x.clone())
        for r, n in enumerate((a, b)):
            if n:
                alone[r].layers[0].update(rows[r][i], rows[r][i].clone())
    layer = _each_row_as_alone(batched, alone)
    for r in range(2):
        assert [p[r] for p in layer._qdrift_pending] == [p[0] for p in alone[r].layers[0]._qdrift_pending]
    totals = [sum(n for n, _ in lengths), sum(n for _, n in lengths)]
    assert all(layer._qdrift_pending[0][r] < totals[r] for r in range(2))  # some tokens did settle


def _each_row_as_alone(batched, alone):
    """Assert each row's real columns of the padded cache hold exactly what that row's own cache holds;
    return the padded cache's layer."""
    layer = batched.layers[0]
    for r in range(2):
        cols = layer._qdrift_real[r].nonzero().squeeze(1)
        assert torch.equal(layer.keys[r][:, cols], alone[r].layers[0].keys[0])
        assert torch.equal(layer.values[r][:, cols], alone[r].layers[0].values[0])
    return layer


@pytest.mark.parametrize("spec", ["w16-a16-kv:4@dyn-win3", "w16-a16-kv:4g4@dyn-win2", "w16-a16-kv:fp8e4m3@unit-win4"])
def test_decode_steps_after_padded_writes_settle_all_rows_in_one_run_as_each_would_alone(spec, monkeypatch):
    # After a padded write each row's pending tokens sit in its own columns, padding among them, for the
    # next `window` decode steps; rows settling the same count then are quantized in one gathered run
    # (row by row before: one call per row per step).
    from qdrift.quant.kv import KVTensorQuantizer, written_columns

    torch.manual_seed(1)
    lengths = [(5, 2), (1, 3)] + [(1, 1)] * 12  # two padded writes, then decode steps of one token a row
    rows = [[torch.randn(1, 2, n, 8) for n, _ in lengths], [torch.randn(1, 2, n, 8) for _, n in lengths]]
    batched, alone = _deferred_layer(spec), [_deferred_layer(spec), _deferred_layer(spec)]
    calls = []
    qdq = KVTensorQuantizer.qdq
    monkeypatch.setattr(KVTensorQuantizer, "qdq", lambda self, x: calls.append(x.shape[0]) or qdq(self, x))
    decoding = []  # the rows of each quantize call of the decode steps
    for i, (a, b) in enumerate(lengths):
        x = torch.zeros(2, 2, max(a, b), 8)
        x[0, :, :a], x[1, :, :b] = rows[0][i][0], rows[1][i][0]
        with written_columns(batched, torch.arange(max(a, b))[None, :] < torch.tensor([a, b])[:, None]):
            batched.layers[0].update(x, x.clone())
        if i >= 2:
            decoding += calls
        calls.clear()
    for r in range(2):
        for i in range(len(lengths)):
            if lengths[i][r]:
                alone[r].layers[0].update(rows[r][i], rows[r][i].clone())
    _each_row_as_alone(batched, alone)
    assert decoding and set(decoding) == {2}  # both rows in each run


def test_cropping_and_reordering_a_padded_batch_keep_each_rows_pending_tokens():
    from qdrift.quant.kv import written_columns

    cache = _deferred_layer("w16-a16-kv:fp8e4m3@unit-win4")
    layer = cache.layers[0]
    real = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    with written_columns(cache, real):
        layer.update(torch.randn(2, 1, 5, 8), torch.randn(2, 1, 5, 8))
    assert layer._qdrift_pending == ([3, 4], [3, 4])  # row 1's first token left the window of 4
    layer.crop(-2)  # the last two columns: padding for row 0, two real tokens of row 1
    assert layer._qdrift_pending == ([3, 2], [3, 2])
    layer.reorder_cache(torch.tensor([1, 0]))
    assert layer._qdrift_pending == ([2, 3], [2, 3])
    assert layer._qdrift_real.tolist() == [[True, True, True], [True, True, True]]


@pytest.mark.parametrize("spec", ["w16-a16-k:4c4@dyn-v:16", "w16-a16-k:4c4@dyn-v:4@dyn-win6"])
def test_generate_with_left_padding_counts_blocks_and_window_in_each_rows_real_tokens(spec):
    # generate() left-pads a batch and passes the attention mask, from which the quantized model reads
    # which columns are real: counted over columns, the padding shifted the token blocks (0.0015 in a
    # logit here). (Left padding alone never moved a window: its columns are the oldest.)
    model = qdrift.quantize(tiny_model("llama"), spec)
    g = torch.Generator().manual_seed(0)
    long, short = torch.randint(3, 200, (9,), generator=g), torch.randint(3, 200, (4,), generator=g)
    ids = torch.zeros(2, 9, dtype=torch.long)
    ids[0], ids[1, 5:] = long, short
    mask = (ids != 0).long()
    mask[0] = 1
    kwargs = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0, "output_scores": True,
              "return_dict_in_generate": True}
    padded = model.generate(input_ids=ids, attention_mask=mask, **kwargs)
    alone = model.generate(input_ids=short[None], attention_mask=torch.ones(1, 4, dtype=torch.long), **kwargs)
    for together, single in zip(padded.scores, alone.scores, strict=True):
        torch.testing.assert_close(together[1], single[0], rtol=1e-5, atol=1e-5)
