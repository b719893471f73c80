"""Response caches: every cache file carries the spec hash, so two specs never share answers."""

from pathlib import Path

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'qdrift[lmeval]')")

from qdrift.code_fingerprint import running_code  # noqa: E402
from qdrift.lmeval import QdriftLM, evaluate, tagged_cache_path  # noqa: E402
from qdrift.lmeval.cache import check_cache_file  # noqa: E402
from qdrift.quant import restore  # noqa: E402

TASK = "organism_keys_mc"


def test_tagged_cache_path_puts_the_tag_in_the_file_name(tmp_path):
    code = running_code()[:12]
    assert tagged_cache_path(tmp_path, "m", "abc") == str(tmp_path / f"m.spec-abc.code-{code}")
    assert tagged_cache_path("out/run", "m", "abc") == f"out/run.m.spec-abc.code-{code}"
    assert tagged_cache_path(f"out/run.m.spec-abc.code-{code}", "m", "abc") == f"out/run.m.spec-abc.code-{code}"
    assert tagged_cache_path("out/run.m.spec-abc.code-0", "m", "abc") != "out/run.m.spec-abc.code-0"


def test_a_cache_file_without_the_spec_hash_or_of_other_code_is_refused():
    with pytest.raises(ValueError, match="spec-abc"):
        check_cache_file("/tmp/plain_rank0.db", "abc")
    with pytest.raises(ValueError, match=f"spec-abc.code-{running_code()[:12]}"):
        check_cache_file("/tmp/m.spec-abc.code-000000000000_rank0.db", "abc")  # written by other code


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
    code = running_code()[:12]
    assert files == sorted([f"tiny.spec-{base.spec_hash}.code-{code}_rank0.db",
                            f"tiny.spec-{variant.spec_hash}.code-{code}_rank0.db"])
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
    with pytest.raises(ValueError, match=f"spec-{lm.spec_hash}"):
        simple_evaluate(model=lm, tasks=[load_task_yaml(own_tasks()[TASK])], limit=1,
                        use_cache=str(Path(tmp_path) / "plain"), task_manager=TaskManager(include_defaults=False))
