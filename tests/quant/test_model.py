"""quantize / restore / spec_of: in place, once, reversible, and loud about bad input."""

import pytest
import torch

import qdrift
from qdrift.quant.compare import weight_errors
from qdrift.tiny import tiny_model

from .conftest import prompt


def test_quantize_is_in_place_and_reports_its_spec(llama):
    out = qdrift.quantize(llama, "w4g32-a16-kv:16")
    assert out is llama
    assert str(qdrift.spec_of(llama)) == "w4g32-a16-kv:16"
    assert qdrift.spec_of(tiny_model("llama")) is None


def test_restore_gives_back_the_baseline_exactly(llama):
    ids = prompt()
    originals = {n: p for n, p in llama.named_parameters()}
    with torch.no_grad():
        ref = llama(ids).logits
        qdrift.quantize(llama, "wfp8e4m3/4g32-a8-kv:fp8e4m3@unit-win2")
        assert not torch.equal(llama(ids).logits, ref)
        qdrift.restore(llama)
        assert torch.equal(llama(ids).logits, ref)
    assert all(p is originals[n] for n, p in llama.named_parameters())
    assert not llama.model._forward_pre_hooks
    assert not any(m._forward_pre_hooks for m in llama.modules())
    assert qdrift.spec_of(llama) is None


def test_weights_are_quantized_once_not_every_forward(llama, monkeypatch):
    qdrift.quantize(llama, "w4g32-a16-kv:16")
    from qdrift.quant import linear, schemes

    def fail(*a, **k):
        raise AssertionError("weight re-quantized during a forward")

    # Patch where it is looked up (linear imports the name) and where it is defined.
    monkeypatch.setattr(linear, "quantize_weight", fail)
    monkeypatch.setattr(schemes, "quantize_weight", fail)
    fmt = schemes.number_format(qdrift.spec_of(llama).decode.weights)
    monkeypatch.setattr(fmt, "fake_quantize", fail)  # no weight format work at all during forwards
    with torch.no_grad():
        llama.generate(prompt(), max_new_tokens=4, do_sample=False)


def test_prefill_and_decode_use_their_own_weights(llama):
    uniform8 = qdrift.quantize(tiny_model("llama"), "w8-a16-kv:16")
    uniform4 = qdrift.quantize(tiny_model("llama"), "w4-a16-kv:16")
    qdrift.quantize(llama, "w8/4-a16-kv:16")
    ids = prompt(n=8, batch=1)
    slot = llama._qdrift_state.modules[0].slots[0]
    with torch.no_grad():
        prefill = llama(ids, use_cache=True)
        assert slot.live.data_ptr() == slot.data["prefill"].data_ptr()
        assert torch.equal(prefill.logits, uniform8(ids).logits)
        cache8 = uniform8(ids, use_cache=True).cache  # same prefill, so the same cache contents
        nxt = prefill.logits[:, -1:].argmax(-1)
        step = llama(nxt, cache=prefill.cache, use_cache=True)
        assert slot.live.data_ptr() == slot.data["decode"].data_ptr()
        assert torch.equal(step.logits, uniform4(nxt, cache=cache8, use_cache=True).logits)


def test_tied_head_named_explicitly_is_untied_from_the_embedding():
    model = tiny_model("llama")
    model.lm_head.weight = model.model.embed_tokens.weight  # tie them
    emb = model.model.embed_tokens.weight.detach().clone()
    qdrift.quantize(model, "w4-a16-kv:16-only:lm_head")
    assert torch.equal(model.model.embed_tokens.weight, emb)
    assert not torch.equal(model.lm_head.weight, emb)


def test_default_selection_skips_head_embeddings_and_routers():
    model = qdrift.quantize(tiny_model("mixtral"), "w4-a16-kv:16")
    names = {t.name for t in model._qdrift_state.targets}
    assert "lm_head" not in names and "model.embed_tokens" not in names
    assert not any(n.endswith(".gate") for n in names)
    assert "model.layers.0.mlp.experts" in names and "model.layers.0.self_attn.q_proj" in names


@pytest.mark.parametrize("arch", ["mixtral", "qwen2_moe"])
def test_a_glob_reaching_decoder_linears_leaves_routers_and_the_head_as_the_default_does(arch):
    def chosen(spec):
        model = qdrift.quantize(tiny_model(arch), spec)
        return {t.name: t.kind for t in model._qdrift_state.targets}

    default = chosen("w8-a8-kv:16")
    for glob in ("model.layers.*", "*", "*.mlp.*,*.self_attn.*"):
        assert chosen(f"w8-a8-kv:16-only:{glob}") == default, glob
    routers = chosen("w8-a16-kv:16-only:*.mlp.gate")  # a glob naming only routers takes them
    assert routers and set(routers.values()) == {"router"}
    assert set(chosen("w8-a16-kv:16-only:lm_head,*.mlp.gate").values()) == {"router", "linear"}


def test_weight_error_shrinks_with_more_bits():
    errs = {}
    for bits in (8, 4, 2):
        model = qdrift.quantize(tiny_model("llama"), f"w{bits}g32-a16-kv:16")
        errs[bits] = max(e.rel_error for e in weight_errors(model))
    assert errs[8] < errs[4] < errs[2]


def test_static_activation_scales_are_calibrated(llama):
    calib = [prompt(n=16, batch=1, seed=s) for s in range(2)]
    qdrift.quantize(llama, "w8-a8t-kv:16", calibration=calib)
    q = llama._qdrift_state.modules[0].acts["prefill"]["in"]
    assert q.scales is not None and float(q.scales.scale.reshape(-1)[0]) > 0
    with torch.no_grad():
        assert torch.isfinite(llama(prompt()).logits).all()


@pytest.mark.parametrize(
    "spec, kwargs, match",
    [
        ("w4g48-a16-kv:16", {}, r"group size 48 does not divide its dimension 128"),
        ("w4-a16-kv:16-only:*.nonexistent", {}, r"include pattern '\*.nonexistent' matches no quantizable module"),
        ("w4-a16-kv:16-skip:*.nothing", {}, r"exclude pattern '\*.nothing' matches no"),
        ("w8-a8t-kv:16", {}, r"static scales .* pass calibration="),
        ("w8-a16-kv:fp8e4m3@static", {}, r"static scales .* pass calibration="),
        ("w8-a16-kv:16", {"calibration": [prompt()]}, r"no static scales to calibrate"),
        ("w8-a8-kv:16-only:model.embed_tokens", {}, r"activations cannot be quantized on embedding"),
    ],
)
def test_bad_input_raises_a_clear_error(llama, spec, kwargs, match):
    with pytest.raises(ValueError, match=match):
        qdrift.quantize(llama, spec, **kwargs)
    assert qdrift.spec_of(llama) is None, "a failed quantize must leave the model untouched"
    assert not any(m._forward_pre_hooks for m in llama.modules())


def test_quantizing_twice_is_refused(llama):
    qdrift.quantize(llama, "w8-a16-kv:16")
    with pytest.raises(ValueError, match="already quantized with 'w8-a16-kv:16'; call qdrift.restore"):
        qdrift.quantize(llama, "w4-a16-kv:16")


def test_restore_without_originals_says_why(llama):
    qdrift.quantize(llama, "w8-a16-kv:16", keep_original=False)
    with pytest.raises(RuntimeError, match="keep_original=False"):
        qdrift.restore(llama)


def test_originals_can_be_parked_on_another_device(llama):
    qdrift.quantize(llama, "w8-a16-kv:16", original_device="cpu")
    ids = prompt()
    with torch.no_grad():
        ref = tiny_model("llama")(ids).logits
        qdrift.restore(llama)
        assert torch.equal(llama(ids).logits, ref)


def test_all_zero_weights_stay_zero_not_nan(llama):
    with torch.no_grad():
        llama.model.layers[0].mlp.up_proj.weight.zero_()
    qdrift.quantize(llama, "w4g32z-a8-kv:16")
    w = llama.model.layers[0].mlp.up_proj.weight
    assert torch.equal(w, torch.zeros_like(w))


def test_expert_banks_get_one_tensor_scale_per_expert():
    """An expert with 100x larger weights must not coarsen the others' per-tensor scale."""
    model = tiny_model("mixtral")
    bank = model.model.layers[0].mlp.experts
    with torch.no_grad():
        bank.down_proj[0].mul_(100)
    ref = bank.down_proj.detach().clone()
    qdrift.quantize(model, "w8t-a16-kv:16")
    w1, r1 = bank.down_proj[1], ref[1]
    scale = r1.abs().max() / 127  # direct reference: symmetric int8, one scale for expert 1 alone
    torch.testing.assert_close(w1, (r1 / scale).round().clamp(-127, 127) * scale)


def test_a_failure_midway_restores_the_model_even_without_kept_originals(llama, monkeypatch):
    from qdrift.quant import linear

    ids = prompt()
    with torch.no_grad():
        ref = llama(ids).logits
    calls = {"n": 0}
    real = linear.quantize_weight

    def fail_on_third(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated failure")
        return real(*a, **k)

    monkeypatch.setattr(linear, "quantize_weight", fail_on_third)
    with pytest.raises(RuntimeError, match="simulated failure"):
        qdrift.quantize(llama, "w4g32-a16-kv:16", keep_original=False)
    assert qdrift.spec_of(llama) is None
    with torch.no_grad():
        assert torch.equal(llama(ids).logits, ref)


def test_path_real_stores_packed_weights_and_runs_fused_kernels():
    from qdrift.real import RealQuantLinear, path_of

    base = tiny_model("llama", dtype=torch.bfloat16)
    fake = qdrift.quantize(tiny_model("llama", dtype=torch.bfloat16), "w4g32-a16-kv:16")
    real = qdrift.quantize(base, "w4g32-a16-kv:16", path="real")
    assert isinstance(real.model.layers[0].mlp.up_proj, RealQuantLinear)
    with torch.no_grad():
        err = (real(prompt()).logits.float() - fake(prompt()).logits.float()).abs().max()
    assert path_of(real).backend.startswith("tinygemm-int4")
    assert err < 0.1  # bfloat16 scales in the kernel (tests/real/test_convert.py says why)


def test_path_real_refuses_calibration_and_unstorable_specs(llama):
    with pytest.raises(ValueError, match="takes no calibration"):
        qdrift.quantize(llama, "w4g32-a16-kv:16", path="real", calibration=[prompt()])
    with pytest.raises(ValueError, match="keeps no original weights"):
        qdrift.quantize(llama, "w4g32-a16-kv:16", path="real", original_device="cpu")
    with pytest.raises(ValueError, match="cannot run on the real path"):
        qdrift.quantize(llama, "w4g32-a8-kv:16", path="real")


def test_stochastic_rounding_draws_differ_between_tensors_whose_names_differ_late():
    # "layers.12" and "layers.21" have the same bytes in another order: the old byte-sum salt gave them one
    # seed, so same-shaped weights drew identical rounding decisions (80 layers had 26 distinct seeds).
    from qdrift.quant.schemes import make_generator
    from qdrift.spec import QuantSpec

    scheme = QuantSpec.parse("w4g32~sr3-a16-kv:16").prefill.weights
    names = [f"model.layers.{i}.mlp.down_proj.weight" for i in range(80)]
    seeds = {make_generator(scheme, n, torch.device("cpu")).initial_seed() for n in names}
    assert len(seeds) == 80
    again = make_generator(scheme, names[12], torch.device("cpu")).initial_seed()
    assert again == make_generator(scheme, names[12], torch.device("cpu")).initial_seed()  # reproducible


def test_parking_originals_leaves_a_tied_heads_live_embedding_in_place():
    # The tied head's original is the embedding the model still reads: moving it would move the live
    # embedding (on a GPU, to the CPU; here to the meta device, which has no data at all).
    model = tiny_model("llama")
    model.lm_head.weight = model.model.embed_tokens.weight
    qdrift.quantize(model, "w4-a16-kv:16-only:lm_head", original_device="meta")
    assert model.model.embed_tokens.weight.device.type == "cpu"
    with torch.no_grad():
        assert torch.isfinite(model(prompt()).logits).all()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for a machine without CUDA")
def test_parking_originals_on_a_missing_gpu_is_refused_before_quantizing():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="original_device='cuda', but torch sees no CUDA device"):
        qdrift.quantize(model, "w8-a16-kv:16", original_device="cuda")
    assert qdrift.spec_of(model) is None  # nothing was done


@pytest.mark.parametrize("spec", ["w16-a4~sr1-kv:16", "w16-a16-kv:4~sr2@dyn"])
def test_reseeding_restarts_stochastic_rounding_so_a_run_does_not_depend_on_the_ones_before(llama, spec):
    from transformers import DynamicCache

    qdrift.quantize(llama, spec)
    ids = prompt()

    def run():  # a fresh cache each time: the KV part rounds only what this forward writes
        with torch.no_grad():
            return llama(ids, cache=DynamicCache(config=llama.config)).logits

    first = run()
    assert not torch.equal(run(), first)  # the stream ran on: a second run draws other roundings
    qdrift.quant.reseed_rounding(llama)
    assert torch.equal(run(), first)
    qdrift.quant.reseed_rounding(tiny_model("llama"))  # unquantized: nothing to reseed, no error
