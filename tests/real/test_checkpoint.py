"""Round trip through the compressed-tensors layout, checked by compressed-tensors' own decompressors."""

import json

import pytest
import torch
from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
from compressed_tensors.quantization import QuantizationConfig
from safetensors.torch import load_file

import qdrift
from qdrift.quant.model import state_of
from qdrift.real import quantize_real
from qdrift.real.checkpoint import load_quantized, quantization_args, save_quantized
from qdrift.spec import TensorScheme
from qdrift.tiny import tiny_model

from .conftest import prompt

SPECS = ["w4g32-a16-kv:16", "w4g64z-a16-kv:16", "w8-a16-kv:16", "w8z-a16-kv:16", "w4t-a16-kv:16",
         "wfp8e4m3-a16-kv:16", "wfp8e4m3g32-a16-kv:16"]


@pytest.mark.parametrize("spec", SPECS)
def test_save_load_round_trip_gives_identical_logits(spec, tmp_path):
    model = quantize_real(tiny_model("llama"), spec)
    save_quantized(model, tmp_path)
    loaded = load_quantized(tmp_path, attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(model(prompt()).logits, loaded(prompt()).logits)
    assert str(qdrift.real.real_spec_of(loaded)) == spec


@pytest.mark.parametrize("arch", ["gemma2", "gemma3", "qwen2"])
def test_models_with_unsaved_buffers_in_weighted_modules_round_trip(arch, tmp_path):
    # Gemma's embedding carries an unsaved embed_scale buffer next to its weight: built on the meta
    # device it could not be rebuilt, so such checkpoints saved but never loaded.
    model = quantize_real(tiny_model(arch), "w8-a16-kv:16")
    save_quantized(model, tmp_path)
    loaded = load_quantized(tmp_path, attn_implementation="eager")
    with torch.no_grad():
        assert torch.equal(model(prompt()).logits, loaded(prompt()).logits)


def _edit_config(directory, edit) -> None:
    path = directory / "config.json"
    cfg = json.loads(path.read_text())
    edit(cfg)
    path.write_text(json.dumps(cfg))


def test_a_declared_spec_other_than_the_stored_weights_is_refused(tmp_path):
    save_quantized(quantize_real(tiny_model("llama"), "w4g32-a16-kv:16"), tmp_path)
    _edit_config(tmp_path, lambda cfg: cfg.update(qdrift_spec="w8-a16-kv:16"))
    with pytest.raises(ValueError, match="declares qdrift_spec 'w8-a16-kv:16'.*stores \\(4g32\\)"):
        load_quantized(tmp_path)


def test_a_checkpoint_that_also_quantizes_activations_is_refused_not_loaded_as_weights_only(tmp_path):
    save_quantized(quantize_real(tiny_model("llama"), "w8-a16-kv:16"), tmp_path)

    def add_activations(cfg):
        group = next(iter(cfg["quantization_config"]["config_groups"].values()))
        group["input_activations"] = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
                                      "dynamic": True}

    _edit_config(tmp_path, add_activations)
    with pytest.raises(ValueError, match="quantizes more than weights \\(input_activations\\)"):
        load_quantized(tmp_path)


@pytest.mark.parametrize("spec", SPECS)
def test_compressed_tensors_decompresses_to_the_fake_quantized_weights(spec, tmp_path):
    save_quantized(quantize_real(tiny_model("llama"), spec), tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    assert config["quant_method"] == "compressed-tensors"
    assert config["format"] == ("float-quantized" if "fp8" in spec else "pack-quantized")
    scheme = QuantizationConfig.model_validate(config).config_groups["group_0"]
    compressor = FloatQuantizationCompressor if "fp8" in spec else PackedQuantizationCompressor
    tensors = load_file(str(tmp_path / "model.safetensors"))
    fake = qdrift.quantize(tiny_model("llama"), spec)
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"):
        local = {k[len(name) + 1:]: v for k, v in tensors.items() if k.startswith(name + ".")}
        theirs = compressor.decompress(local, scheme)["weight"]
        ours = fake.get_submodule(name).weight
        assert torch.equal(theirs.float(), ours), f"{name}: max diff {(theirs.float() - ours).abs().max():.3g}"
    assert "lm_head" in config["ignore"] and state_of(fake) is not None


def test_int4_g128_linear_bytes_are_under_0_3_of_bf16(tmp_path):
    model = quantize_real(tiny_model("llama"), "w4g128-a16-kv:16")
    save_quantized(model, tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    q = sum(v.numel() * v.element_size() for k, v in tensors.items() if k.rsplit(".", 1)[-1] in
            ("weight_packed", "weight_scale"))
    bf16 = sum(m.in_features * m.out_features * 2 for m in qdrift.real.real_modules(model).values())
    assert q / bf16 <= 0.30


def test_inexpressible_schemes_are_named():
    with pytest.raises(ValueError, match="int4, int8 and fp8e4m3 weights, not 'nf4g64'"):
        quantization_args(TensorScheme.parse("nf4g64", "weights"))


def test_conv1d_models_are_refused(tmp_path):
    model = quantize_real(tiny_model("gpt2"), "w8-a16-kv:16")
    with pytest.raises(ValueError, match="Conv1D layers have no compressed-tensors layout"):
        save_quantized(model, tmp_path)


def test_unquantized_model_cannot_be_saved(tmp_path):
    with pytest.raises(ValueError, match="not really quantized"):
        save_quantized(tiny_model("llama"), tmp_path)


def _rewrite(directory, edit, keep_checksums=False) -> None:
    """Edit model.safetensors' tensors; by default drop the recorded checksums, as a tool that rewrites the
    file without knowing them would (so the structural checks are what is tested)."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    path = directory / "model.safetensors"
    tensors = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        metadata = dict(f.metadata())
    edit(tensors)
    if not keep_checksums:
        metadata.pop("qdrift_sha256")
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata=metadata)


SCALE = "model.layers.0.self_attn.q_proj.weight_scale"
PACKED = "model.layers.0.self_attn.q_proj.weight_packed"


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.update({SCALE: t[SCALE][:, :1]}), r"weight_scale must have shape \(\d+, \d+\) .* got \(\d+, 1\)"),
    (lambda t: t[SCALE].view(-1).__setitem__(3, float("nan")), "weight_scale has 1 value\\(s\\) that are NaN, infinite, zero or negative"),
    (lambda t: t[SCALE].view(-1).__setitem__(0, 0.0), "weight_scale has 1 value\\(s\\) that are NaN"),
    (lambda t: t.update({SCALE: t[SCALE].to(torch.int32)}), "weight_scale must be floating point, got torch.int32"),
    (lambda t: t.update({PACKED: t[PACKED][:, :-1]}), "weight_packed must be int32 of shape"),
    (lambda t: t.pop(PACKED), "missing weight_packed"),
])
def test_a_checkpoint_with_bad_scales_or_packed_shapes_is_refused_naming_the_module(tmp_path, edit, message):
    save_quantized(quantize_real(tiny_model("llama"), "w4g32-a16-kv:16"), tmp_path)
    _rewrite(tmp_path, edit)
    with pytest.raises(ValueError, match=f"quantized module model.layers.0.self_attn.q_proj: {message}"):
        load_quantized(tmp_path)


def test_random_bytes_in_the_packed_data_fail_the_checksum_recorded_at_save(tmp_path):
    save_quantized(quantize_real(tiny_model("llama"), "w4g32-a16-kv:16"), tmp_path)
    g = torch.Generator().manual_seed(0)
    _rewrite(tmp_path, lambda t: t[PACKED].view(-1)[:8].copy_(torch.randint(-2**31, 2**31 - 1, (8,), generator=g,
                                                                             dtype=torch.int32)), keep_checksums=True)
    with pytest.raises(ValueError, match=f"differ from the checksums recorded when it was saved \\(e.g. {PACKED}\\)"):
        load_quantized(tmp_path)


def test_a_truncated_checkpoint_is_one_error_naming_the_file(tmp_path):
    save_quantized(quantize_real(tiny_model("llama"), "w8-a16-kv:16"), tmp_path)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(ValueError, match="model.safetensors cannot be read"):
        load_quantized(tmp_path)
