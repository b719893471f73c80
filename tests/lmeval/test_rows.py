"""Tidy rows from lm-eval's logged samples (synthetic samples: no model needed)."""

import math

import pytest

from qdrift.lmeval.rows import KV_NOTE, rows_from_results, rows_from_samples


def mc_sample(doc_id, lls, gold, acc):
    return {"doc_id": doc_id, "target": gold, "filtered_resps": [(x, False) for x in lls], "filter": "none",
            "acc": acc, "prompt_hash": f"p{doc_id}"}


def test_multiple_choice_rows_carry_gold_loglik_and_its_share_among_choices():
    [row] = rows_from_samples("t", [mc_sample(3, [-1.0, -2.0, -3.0], 1, 0.0)], "multiple_choice",
                              model="m", spec="w4g32-a16-kv:16", spec_hash="h")
    assert (row["task"], row["doc_id"], row["pred"], row["gold"], row["correct"]) == ("t", 3, 0, 1, 0.0)
    assert row["gold_loglik"] == -2.0
    lse = math.log(sum(math.exp(x) for x in (-1.0, -2.0, -3.0)))
    assert row["gold_logprob"] == pytest.approx(-2.0 - lse)
    assert row["kv_exercised"] is False and row["note"] is None  # no KV part in the spec


def test_a_kv_spec_on_a_loglikelihood_task_is_flagged_but_not_on_generation():
    mc = rows_from_samples("t", [mc_sample(0, [-1.0, -2.0], 0, 1.0)], "multiple_choice", spec="w16-a16-kv:8g32@dyn")
    gen = rows_from_samples("g", [{"doc_id": 0, "target": "4", "filtered_resps": ["4"], "filter": "strict-match",
                                   "exact_match": 1.0}], "generate_until", spec="w16-a16-kv:8g32@dyn")
    assert mc[0]["note"] == KV_NOTE and mc[0]["kv_exercised"] is False
    assert gen[0]["note"] is None and gen[0]["kv_exercised"] is True
    assert (gen[0]["answer"], gen[0]["correct"], gen[0]["filter"]) == ("4", 1.0, "strict-match")


def test_results_without_samples_name_log_samples():
    with pytest.raises(ValueError, match="log_samples=True"):
        rows_from_results({"results": {}})
