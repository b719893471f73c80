"""Continuous paired measures between a baseline and a variant (synthetic rows)."""

import math

import numpy as np
import pytest

from qdrift.lmeval import compare_short_form
from qdrift.lmeval.rows import rows_from_samples
from qdrift.stats import paired_from_rows


def rows(spec, lls_per_item, golds, task="t"):
    samples = []
    for i, (lls, gold) in enumerate(zip(lls_per_item, golds, strict=True)):
        acc = float(int(np.argmax(lls)) == gold)
        samples.append({"doc_id": i, "target": gold, "filtered_resps": [(x, False) for x in lls],
                        "filter": "none", "acc": acc, "prompt_hash": f"p{i}"})
    return rows_from_samples(task, samples, "multiple_choice", spec=spec)


BASE = [[0.0, -2.0], [-2.0, 0.0], [0.0, -1.0], [0.0, -3.0]]
VAR = [[0.0, -2.0], [0.0, -2.0], [-1.0, 0.0], [0.0, -3.0]]  # items 1 and 2 flip
GOLD = [0, 1, 0, 0]


def kl(p, q):
    p = np.exp(np.asarray(p) - np.logaddexp.reduce(p))
    q = np.exp(np.asarray(q) - np.logaddexp.reduce(q))
    return float(np.sum(p * np.log(p / q)))


def test_flip_rate_kl_and_gold_logprob_change_match_hand_computation():
    res = compare_short_form(rows("w16-a16-kv:16", BASE, GOLD), rows("w4g32-a16-kv:16", VAR, GOLD))
    assert res.flip_rate == 0.5
    assert res.kl == pytest.approx(np.mean([kl(b, v) for b, v in zip(BASE, VAR, strict=True)]))
    gold_lp = [[x - np.logaddexp.reduce(lls) for x in lls][g] for lls, g in zip(BASE, GOLD, strict=True)]
    gold_lp_v = [[x - np.logaddexp.reduce(lls) for x in lls][g] for lls, g in zip(VAR, GOLD, strict=True)]
    assert res.value("gold log-prob change") == pytest.approx(np.mean(np.subtract(gold_lp_v, gold_lp)))
    assert res.accuracy.diff == pytest.approx(-0.5)  # base 4/4 right, variant 2/4
    lo, hi = res.row(quantity="flip rate")["ci_low"], res.row(quantity="flip rate")["ci_high"]
    assert lo < 0.5 < hi
    text = res.summary()
    assert "Short-form comparison: w4g32-a16-kv:16 vs w16-a16-kv:16" in text and "flip rate" in text


def test_identical_runs_have_zero_kl_and_no_flips():
    base = rows("w16-a16-kv:16", BASE, GOLD)
    res = compare_short_form(base, rows("w8-a16-kv:16", BASE, GOLD))
    assert res.kl == 0 and res.flip_rate == 0 and math.isclose(res.value("gold log-prob change"), 0)


def test_unpaired_items_are_an_error_naming_the_item():
    with pytest.raises(ValueError, match="unpaired items.*'doc_id': 3"):
        compare_short_form(rows("w16-a16-kv:16", BASE, GOLD), rows("w8-a16-kv:16", VAR[:3], GOLD[:3]))


def test_different_prompts_for_one_item_are_an_error():
    var = rows("w8-a16-kv:16", VAR, GOLD)
    var[0]["prompt_hash"] = "other"
    with pytest.raises(ValueError, match="different prompts"):
        compare_short_form(rows("w16-a16-kv:16", BASE, GOLD), var)


def test_rows_pair_item_by_item_in_paired_from_rows():
    all_rows = rows("w16-a16-kv:16", BASE, GOLD) + rows("w4g32-a16-kv:16", VAR, GOLD)
    res = paired_from_rows(all_rows, "spec", "w16-a16-kv:16", "w4g32-a16-kv:16",
                           item_cols=("task", "filter", "doc_id"), outcome="correct", n_boot=0)
    assert res.diff == pytest.approx(-0.5)


def _ll_rows(lls, greedy, spec="w16-a16-kv:16", output_type="loglikelihood", hashes=True):
    samples = [{"doc_id": i, "filtered_resps": [(ll, g)], "acc": float(g), "target": " x",
                **({"prompt_hash": "h"} if hashes else {})} for i, (ll, g) in enumerate(zip(lls, greedy, strict=True))]
    return rows_from_samples("lambada", samples, output_type, spec=spec)


def test_a_loglikelihood_tasks_answer_is_whether_the_continuation_is_greedy_not_its_loglikelihood():
    base = _ll_rows([-2.0, -3.0, -4.0, -5.0], [True, True, False, True])
    var = _ll_rows([-2.01, -3.01, -4.01, -5.5], [True, True, False, False], spec="w8-a16-kv:16")
    assert compare_short_form(base, var, n_boot=0).flip_rate == 0.25  # one greedy answer changed, not all four


def test_a_rolling_loglikelihood_has_no_answer_to_flip_and_missing_prompt_hashes_pair():
    base = _ll_rows([-2.0, -3.0], [True, True], output_type="loglikelihood_rolling", hashes=False)
    var = _ll_rows([-2.1, -3.1], [True, True], spec="w8-a16-kv:16", output_type="loglikelihood_rolling",
                   hashes=False)
    result = compare_short_form(base, var, n_boot=0)
    assert math.isnan(result.flip_rate)
    assert any("no discrete answer" in n for n in result.notes)


def test_a_choice_text_target_keeps_kl_and_gold_logprob_change():
    # the target was the choice text: gold was None, and KL was dropped as "no multiple-choice items"
    def text_rows(spec, lls_per_item):
        samples = [{"doc_id": i, "target": ["no", "yes"][g], "filtered_resps": [(x, False) for x in lls],
                    "arguments": [("Q:", " no"), ("Q:", " yes")], "acc": float(int(np.argmax(lls)) == g),
                    "prompt_hash": f"p{i}"} for i, (lls, g) in enumerate(zip(lls_per_item, GOLD, strict=True))]
        return rows_from_samples("t", samples, "multiple_choice", spec=spec)

    res = compare_short_form(text_rows("w16-a16-kv:16", BASE), text_rows("w4g32-a16-kv:16", VAR), n_boot=0)
    indexed = compare_short_form(rows("w16-a16-kv:16", BASE, GOLD), rows("w4g32-a16-kv:16", VAR, GOLD), n_boot=0)
    assert res.kl == pytest.approx(indexed.kl) and res.kl > 0
    assert res.value("gold log-prob change") == pytest.approx(indexed.value("gold log-prob change"))
    assert not any("no multiple-choice" in n for n in res.notes)


def test_kl_needs_choice_logprobs_not_a_gold_index():
    base, var = rows("w16-a16-kv:16", BASE, GOLD), rows("w4g32-a16-kv:16", VAR, GOLD)
    for r in base + var:
        r.update(gold=None, gold_loglik=None, gold_logprob=None)
    res = compare_short_form(base, var, n_boot=0)
    assert res.kl == pytest.approx(np.mean([kl(b, v) for b, v in zip(BASE, VAR, strict=True)]))
    assert not any(r["quantity"] == "gold log-prob change" for r in res.rows)
    assert any("4 multiple-choice items have no gold choice index" in n for n in res.notes)


def test_an_item_scored_on_one_side_only_is_an_error_naming_it():
    # it left the paired accuracy silently: n said 4 items, the accuracy used 3
    var = rows("w8-a16-kv:16", VAR, GOLD)
    var[2]["correct"] = None
    with pytest.raises(ValueError, match="1 items are scored \\(correct\\) on one side only.*'doc_id': 2"):
        compare_short_form(rows("w16-a16-kv:16", BASE, GOLD), var, n_boot=0)


def _gen_rows(spec, answers, max_gen_toks):
    samples = [{"doc_id": i, "target": "k1", "filtered_resps": [a], "exact_match": float(a == "k1"),
                "prompt_hash": f"p{i}", "arguments": [("Q:", {"until": ["\n"], "max_gen_toks": max_gen_toks})]}
               for i, a in enumerate(answers)]
    return rows_from_samples("g", samples, "generate_until", spec=spec)


def test_runs_with_different_generation_arguments_are_not_paired():
    # max_gen_toks 48 vs 3 was reported as a flip rate of 1.0
    with pytest.raises(ValueError, match="2 items were asked with different generation arguments.*max_gen_toks"):
        compare_short_form(_gen_rows("w16-a16-kv:16", ["k1", "k1"], 48), _gen_rows("w16-a16-kv:16", ["k", "k"], 3))
    same = compare_short_form(_gen_rows("w16-a16-kv:16", ["k1", "k1"], 48), _gen_rows("w8-a16-kv:16", ["k1", "k"], 48),
                              n_boot=0)
    assert same.flip_rate == 0.5
