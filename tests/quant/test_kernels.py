import pytest

from qdrift.quant.kernels import check_path
from qdrift.spec import QuantSpec

FP8 = QuantSpec.parse("wfp8e4m3-afp8e4m3-kv:16")


def test_fake_path_runs_every_format_everywhere():
    check_path(FP8, "fake", "cpu")
    check_path(FP8, "fake", "cuda", (7, 5))


def test_fp8_kernels_on_pre_hopper_gpu_are_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"compute capability >= 8.9 .* this GPU has 8.0.*path='fake'"):
        check_path(FP8, "real", "cuda", (8, 0))


def test_fp8_kernels_on_cpu_are_refused():
    with pytest.raises(ValueError, match="this model is on 'cpu'"):
        check_path(FP8, "real", "cpu")


def test_int_weights_pass_the_hardware_check_anywhere():
    check_path(QuantSpec.parse("w4g128-a16-kv:16"), "real", "cpu")
    check_path(FP8, "real", "cuda", (9, 0))


def test_unknown_path_lists_the_valid_ones():
    with pytest.raises(ValueError, match="Unknown execution path 'gpu'. Valid: fake, real"):
        check_path(FP8, "gpu", "cpu")
