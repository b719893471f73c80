"""Response caches: every cache file carries the model's key (weights, tokenizer, options), the spec hash
and the code, so two models, dtypes or specs never share answers."""

from pathlib import Path

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'qdrift[lmeval]')")

from qdrift.code_fingerprint import running_code  # noqa: E402
from qdrift.lmeval import QdriftLM, evaluate, tagged_cache_path  # noqa: E402
from qdrift.lmeval.cache import cache_key, check_cache_file  # noqa: E402
from qdrift.quant import quantize, restore  # noqa: E402

TASK = "organism_keys_mc"


def test_tagged_cache_path_puts_the_tag_in_the_file_name(tmp_path):
    key = cache_key("f00d", "abc")
    assert key == f"model-f00d.spec-abc.code-{running_code()[:12]}"
    assert tagged_cache_path(tmp_path, "m", key) == str(tmp_path / f"m.{key}")
    assert tagged_cache_path("out/run", "m", key) == f"out/run.m.{key}"
    assert tagged_cache_path(f"out/run.m.{key}", "m", key) == f"out/run.m.{key}"
    assert tagged_cache_path("out/run.m.spec-abc.code-0", "m", key) != "out/run.m.spec-abc.code-0"
    with pytest.raises(ValueError, match="not a cache key .*QdriftLM.cache_key"):  # a bare spec hash, as before
        tagged_cache_path(tmp_path, "m", "abc")


def test_a_cache_file_without_the_model_key_spec_hash_or_of_other_code_is_refused():
    key = cache_key("f00d", "abc")
    with pytest.raises(ValueError, match="spec-abc"):
        check_cache_file("/tmp/plain_rank0.db", key)
    with pytest.raises(ValueError, match=f"spec-abc.code-{running_code()[:12]}"):
        check_cache_file("/tmp/m.model-f00d.spec-abc.code-000000000000_rank0.db", key)  # written by other code
    with pytest.raises(ValueError, match="model-f00d"):
        check_cache_file(f"/tmp/m.spec-abc.code-{running_code()[:12]}_rank0.db", key)  # the old, model-less name


def _logliks(rows):
    return [r["choice_loglik"] for r in rows]


def test_two_specs_of_one_model_never_share_cached_answers(tiny, tmp_path, monkeypatch):
    model, tok = tiny
    base = QdriftLM(pretrained=model, tokenizer=tok, name="tiny")
    first = evaluate(base, TASK, limit=2, use_cache=tmp_path)
    variant = QdriftLM(pretrained=model, tokenizer=tok, name="tiny", spec="w4g32-a16-kv:16")
    try:
        second = evaluate(variant, TASK, limit=2, use_cache=tmp_path)
    finally:
        restore(model)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert base.model_key == variant.model_key  # one model: only the spec tells the files apart
    assert len(files) == 2 and {"spec-" + base.spec_hash, "spec-" + variant.spec_hash} == {
        next(part for part in f.split(".") if part.startswith("spec-")) for f in files}
    assert _logliks(second.rows) != _logliks(first.rows)  # recomputed under spec B, not A's answers
    assert second.results["config"]["qdrift_spec_hash"] == variant.spec_hash  # and the results file says which

    def no_forward(*a, **k):
        raise AssertionError("the baseline rerun should be served from its cache")

    monkeypatch.setattr(base, "_model_call", no_forward)
    again = evaluate(base, TASK, limit=2, use_cache=tmp_path)
    assert _logliks(again.rows) == _logliks(first.rows)


def test_lm_eval_with_an_untagged_cache_path_is_refused(tiny, tmp_path):
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from qdrift.lmeval.tasks import load_task_yaml, own_tasks

    lm = QdriftLM(pretrained=tiny[0], tokenizer=tiny[1], name="tiny")
    with pytest.raises(ValueError, match=f"model-{lm.model_key}.spec-{lm.spec_hash}"):
        simple_evaluate(model=lm, tasks=[load_task_yaml(own_tasks()[TASK])], limit=1,
                        use_cache=str(Path(tmp_path) / "plain"), task_manager=TaskManager(include_defaults=False))


def test_two_model_objects_of_one_class_without_a_name_never_share_cached_answers(tmp_path):
    # both were tagged `LlamaForCausalLM.spec-...`: the second run got the first model's loglikelihoods
    from qdrift.tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    first = QdriftLM(pretrained=tiny_model("llama", seed=0), tokenizer=tok)
    second = QdriftLM(pretrained=tiny_model("llama", seed=1), tokenizer=tok)
    assert first.base_name == second.base_name and first.cache_tag != second.cache_tag
    a = evaluate(first, TASK, limit=1, use_cache=tmp_path)
    b = evaluate(second, TASK, limit=1, use_cache=tmp_path)
    assert _logliks(b.rows) != _logliks(a.rows) and len(list(tmp_path.iterdir())) == 2


def test_the_model_key_follows_weights_tokenizer_and_options_not_the_object():
    from qdrift.tiny import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    key = QdriftLM(pretrained=tiny_model("llama"), tokenizer=tok).model_key
    assert QdriftLM(pretrained=tiny_model("llama"), tokenizer=tiny_tokenizer()).model_key == key  # same weights
    assert QdriftLM(pretrained=tiny_model("llama"), tokenizer=tok, max_length=64).model_key != key
    assert QdriftLM(pretrained=tiny_model("llama"), tokenizer=tok, add_bos_token=True).model_key != key
    assert QdriftLM(pretrained=tiny_model("llama"), tokenizer=tok, mixed_precision_dtype="bfloat16").model_key != key
    assert QdriftLM(pretrained=tiny_model("llama", dtype=torch.bfloat16), tokenizer=tok).model_key != key
    other_tok = tiny_tokenizer()
    other_tok.chat_template = "{{ messages }}"
    assert QdriftLM(pretrained=tiny_model("llama"), tokenizer=other_tok).model_key != key
    assert QdriftLM(pretrained=tiny_model("llama"), tokenizer=tok, max_length=None).model_key == key  # HFLM's default


def test_a_model_quantized_here_or_before_has_the_key_of_its_full_precision_weights(tiny):
    model, tok = tiny
    plain = QdriftLM(pretrained=model, tokenizer=tok).model_key
    quantize(model, "w4g32-a16-kv:16")
    try:
        assert QdriftLM(pretrained=model, tokenizer=tok).model_key == plain
    finally:
        restore(model)


def test_a_model_without_its_full_precision_weights_refuses_a_cache(tmp_path):
    from qdrift.tiny import tiny_model, tiny_tokenizer

    model = tiny_model("llama")
    quantize(model, "w4g32-a16-kv:16", keep_original=False)
    lm = QdriftLM(pretrained=model, tokenizer=tiny_tokenizer())
    with pytest.raises(ValueError, match="use_cache refused .*keep_original=False"):
        evaluate(lm, TASK, limit=1, use_cache=tmp_path)
    assert not list(tmp_path.iterdir())


def test_calibrated_static_scales_are_in_the_key():
    from qdrift.tiny import tiny_model, tiny_tokenizer

    tok, spec = tiny_tokenizer(), "w16-a8@static-kv:16"
    keys = [QdriftLM(pretrained=tiny_model("llama"), tokenizer=tok, spec=spec,
                     calibration=[torch.arange(start, start + 16)]).model_key for start in (1, 1, 100)]
    assert keys[0] == keys[1] != keys[2]


def test_one_model_by_name_in_float32_and_bfloat16_never_share_cached_answers(tmp_path):
    # the dtype was not in the tag: the bf16 run returned the float32 run's answers
    f32 = QdriftLM(pretrained="tiny:llama", dtype="float32")
    bf16 = QdriftLM(pretrained="tiny:llama", dtype="bfloat16")
    assert f32.cache_tag != bf16.cache_tag
    assert QdriftLM(pretrained="tiny:llama", dtype=torch.bfloat16).cache_tag == bf16.cache_tag
    a = evaluate(f32, TASK, limit=1, use_cache=tmp_path)
    b = evaluate(bf16, TASK, limit=1, use_cache=tmp_path)
    assert _logliks(b.rows) != _logliks(a.rows)


def test_dtype_with_a_model_object_is_refused_not_ignored(tiny):
    with pytest.raises(ValueError, match="dtype='bfloat16' with a model object.*model.to"):
        QdriftLM(pretrained=tiny[0], tokenizer=tiny[1], dtype="bfloat16")
