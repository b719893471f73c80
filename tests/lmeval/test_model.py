"""The registered `qdrift` lm-eval model: loading by name, specs, identity."""

import re

import pytest

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'qdrift[lmeval]')")

from lm_eval.api.registry import get_model  # noqa: E402

from qdrift.code_fingerprint import running_code  # noqa: E402
from qdrift.lmeval import QdriftLM  # noqa: E402
from qdrift.quant import quantize, restore, spec_of  # noqa: E402
from qdrift.spec import QuantSpec  # noqa: E402


def test_importing_qdrift_lmeval_registers_the_model():
    assert get_model("qdrift") is QdriftLM


def test_model_by_name_is_quantized_and_named_by_its_spec():
    lm = QdriftLM(pretrained="tiny:llama", spec="w4g32-a16-kv:16")
    spec = QuantSpec.parse("w4g32-a16-kv:16")
    assert spec_of(lm.model) == spec
    assert lm.model_name == f"tiny:llama@w4g32-a16-kv:16#{spec.hash}"
    assert re.fullmatch(rf"tiny-llama\.model-[0-9a-f]{{16}}\.spec-{spec.hash}\.code-{running_code()[:12]}", lm.cache_tag)


def test_no_spec_is_the_noop_baseline():
    lm = QdriftLM(pretrained="tiny:llama")
    assert spec_of(lm.model) is None and lm.spec_str == "w16-a16-kv:16" and not lm.applied_here


def test_an_already_quantized_model_keeps_its_spec_and_refuses_another(tiny):
    model, tok = tiny
    quantize(model, "w8-a16-kv:16")
    try:
        lm = QdriftLM(pretrained=model, tokenizer=tok, name="tiny")
        assert lm.spec_str == "w8-a16-kv:16" and not lm.applied_here
        with pytest.raises(ValueError, match="already quantized with 'w8-a16-kv:16'"):
            QdriftLM(pretrained=model, tokenizer=tok, spec="w4g32-a16-kv:16")
    finally:
        restore(model)


def test_unknown_pretrained_names_the_builtins():
    # every shipped fine-tune is offered; the list grows as fine-tunes ship
    with pytest.raises(ValueError, match=r"valid built-ins: organism, smollm2, smollm2-agent(, [\w-]+)*, tiny:<arch>") as err:
        QdriftLM(pretrained="no-such-model")
    assert "smollm2-agent-stage2" in str(err.value)


def test_a_model_object_needs_its_tokenizer(tiny):
    with pytest.raises(ValueError, match="tokenizer=None"):
        QdriftLM(pretrained=tiny[0])


def test_loglikelihood_forward_runs_without_a_cache_so_a_kv_spec_cannot_enter():
    import torch

    lm = QdriftLM(pretrained="tiny:llama", spec="w16-a16-kv:2g32@dyn")
    ids = torch.arange(1, 40).unsqueeze(0)
    with torch.no_grad():
        with_cache = lm.model(ids).logits  # transformers builds a cache; qdrift quantizes it on write
        no_cache = lm.model(ids, use_cache=False).logits
    assert not torch.allclose(with_cache, no_cache)
    assert torch.equal(lm._model_call(ids), no_cache)


def test_pretrained_organism_is_the_embedded_model():
    lm = QdriftLM(pretrained="organism", spec="w8-a16-kv:16")
    assert lm.base_name == "organism" and lm.tokenizer.eos_token == "<|im_end|>"
    assert str(spec_of(lm.model)) == "w8-a16-kv:16"


def test_loglikelihood_scoring_honours_mixed_precision_as_lm_evals_own_model_does():
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from qdrift.tiny import tiny_model, tiny_tokenizer

    def score(cls, dtype):
        lm = cls(pretrained=tiny_model("llama"), tokenizer=tiny_tokenizer(), mixed_precision_dtype=dtype,
                 batch_size=1)
        req = Instance("loglikelihood", {}, ("The cat ", "sat on the mat"), 0)
        return lm.loglikelihood([req], disable_tqdm=True)[0][0]

    reference = score(HFLM, "bfloat16")
    assert score(QdriftLM, "bfloat16") == reference != score(QdriftLM, None)


@pytest.mark.parametrize("spec", ["w16-a16-k:4c4@dyn-v:4@dyn", "w16-a16-kv:4@dyn-win4"])
def test_batched_generation_with_kv_blocks_or_a_window_runs_and_gives_each_item_its_text_alone(spec):
    # lm-eval left-pads batched generation; token blocks and the window count each item's real tokens
    # (from the attention mask), so the padding moves no block (the logits: tests/quant/test_kv.py).
    from lm_eval.api.instance import Instance

    contexts = ["The cat sat on the mat and then", "Hi!", "Hello", "A much longer context, to pad the others well, goes"]
    reqs = [Instance("generate_until", {}, (c, {"until": ["\n\n"], "max_gen_toks": 32, "do_sample": False}), i)
            for i, c in enumerate(contexts)]
    alone = QdriftLM(pretrained="tiny:llama", spec=spec, batch_size=1).generate_until(reqs, disable_tqdm=True)
    together = QdriftLM(pretrained="tiny:llama", spec=spec, batch_size=4).generate_until(reqs, disable_tqdm=True)
    assert together == alone


def test_an_unknown_model_argument_is_refused_not_ignored():
    # `spce=` (a typo for spec=) was swallowed by HFLM's **kwargs and the baseline ran as if quantized
    from qdrift.lmeval.model import QdriftLM

    with pytest.raises(ValueError, match="unknown model argument\\(s\\) spce for the qdrift model; qdrift's are pretrained, spec"):
        QdriftLM(pretrained="organism", spce="w2-a16-kv:16")


def test_the_lmeval_command_says_a_bad_spec_without_a_traceback():
    from qdrift.cli import main

    with pytest.raises(SystemExit, match="qdrift lmeval: .*bogus"):
        main(["lmeval", "--model", "qdrift", "--model_args", "pretrained=organism,spec=bogus", "--include_path",
              "evals/organism", "--tasks", "organism_keys_mc", "--limit", "1"])


def test_a_one_token_wide_loglikelihood_request_is_prefill_alone_and_in_a_batch():
    # alone its forward was one token wide, so a split spec ran it with its decode weights; beside a longer
    # request, padded, with its prefill weights: the loglikelihood depended on the batch size
    from lm_eval.api.instance import Instance

    short, long = ("A", "B"), ("The cat sat on the mat and", " then it left")  # byte tokens: "A" feeds 1 token
    reqs = [Instance("loglikelihood", {}, args, i) for i, args in enumerate([short, long])]

    def score(spec, batch_size):
        lm = QdriftLM(pretrained="tiny:llama", spec=spec, batch_size=batch_size)
        return [r[0] for r in lm.loglikelihood(reqs, disable_tqdm=True)]

    alone, batched = score("w8/4g32-a16-kv:16", 1), score("w8/4g32-a16-kv:16", 2)
    assert alone[0] == pytest.approx(batched[0], abs=1e-5)
    assert alone[0] == pytest.approx(score("w8-a16-kv:16", 1)[0], abs=1e-5)  # its prefill part
