import pytest

from qdrift.real import ExecutionPath, path_of, quantize_real
from qdrift.tiny import tiny_model


def test_path_fields_are_validated():
    with pytest.raises(ValueError, match="unknown path 'gpu'. Valid: fake, real"):
        ExecutionPath("gpu", "x", "cpu", "float32")
    with pytest.raises(ValueError, match="tp_size"):
        ExecutionPath("real", "x", "cpu", "float32", tp_size=0)


def test_real_model_path_is_unknown_until_it_runs():
    model = quantize_real(tiny_model("llama"), "w8-a16-kv:16")
    with pytest.raises(RuntimeError, match="has not run a forward"):
        path_of(model)


def test_unquantized_or_fake_model_reports_the_fake_path():
    p = path_of(tiny_model("llama"))
    assert (p.path, p.backend, p.device, p.dtype, p.tp_size) == ("fake", "fake-quant", "cpu", "float32", 1)
