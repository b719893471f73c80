import pytest
import torch
from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

from qdrift.quant.schemes import quantize_weight
from qdrift.real.packing import codes_of, dequantize_weight, pack_int4, pack_weight, unpack_int4
from qdrift.spec import TensorScheme

SCHEMES = ["4g128", "4g32z", "4", "4t", "4tz", "8", "8z", "8g64~mse", "4g32~sr3", "fp8e4m3", "fp8e4m3g64", "fp8e4m3t"]


@pytest.mark.parametrize("text", SCHEMES)
def test_stored_weight_dequantizes_to_exactly_the_fake_quantized_weight(text):
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(1))
    scheme = TensorScheme.parse(text, "weights")
    packed = pack_weight(w, scheme, "layer.weight")
    assert torch.equal(dequantize_weight(packed), quantize_weight(w, scheme, "layer.weight"))


def test_int4_is_two_codes_a_byte_in_compressed_tensors_byte_order():
    codes = torch.randint(0, 16, (8, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    packed = pack_int4(codes)
    assert packed.shape == (8, 32) and packed.dtype == torch.uint8
    assert torch.equal(unpack_int4(packed), codes)
    # compressed-tensors packs signed codes (unsigned - 8) into int32 words: same bytes, little-endian.
    theirs = pack_to_int32((codes.to(torch.int16) - 8).to(torch.int8), 4)
    assert torch.equal(packed.view(torch.int32), theirs)


def test_storage_dtypes_and_sizes():
    w = torch.randn(64, 256)
    p4 = pack_weight(w, TensorScheme.parse("4g128", "weights"), "w")
    p8 = pack_weight(w, TensorScheme.parse("8", "weights"), "w")
    pf = pack_weight(w, TensorScheme.parse("fp8e4m3", "weights"), "w")
    assert (p4.data.dtype, p8.data.dtype, pf.data.dtype) == (torch.uint8, torch.int8, torch.float8_e4m3fn)
    bf16_bytes = w.numel() * 2
    # 4 bits + one float32 scale per 128 weights = 4.25 bits: 0.266 of bf16.
    assert p4.nbytes() / bf16_bytes == pytest.approx(4.25 / 16)
    assert codes_of(p4).abs().max() <= 7  # narrow symmetric range, as the fake path


@pytest.mark.parametrize("text, word", [("nf4g64", "nf4"), ("3g128", "int3"), ("mxfp4", "mxfp4"), ("fp8e5m2", "fp8e5m2")])
def test_formats_without_storage_are_refused_by_name(text, word):
    with pytest.raises(ValueError, match=f"{word}.*no packed storage format.*Stored: int4 and int8"):
        pack_weight(torch.randn(8, 128), TensorScheme.parse(text, "weights"), "w")
