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


def test_a_choice_text_target_maps_to_its_index_as_lm_eval_scores_it():
    # doc_to_target "{{choices[gold]}}": lm-eval's process_results does choices.index(target); the row had gold None
    sample = {**mc_sample(0, [-1.0, -2.0, -3.0], "beta", 0.0),
              "arguments": [("Q:", " alpha"), ("Q:", " beta"), ("Q:", " gamma")]}
    [row] = rows_from_samples("t", [sample], "multiple_choice")
    assert row["gold"] == 1 and row["gold_loglik"] == -2.0 and row["gold_logprob"] is not None
    [other] = rows_from_samples("t", [{**sample, "target": "delta"}], "multiple_choice")  # not a choice
    assert other["gold"] is None and other["choice_logprob"] is not None


def test_a_split_prefill_decode_spec_on_a_loglikelihood_task_says_its_decode_part_is_not_exercised():
    mc = rows_from_samples("t", [mc_sample(0, [-1.0, -2.0], 0, 1.0)], "multiple_choice", spec="w8/4g32-a16-kv:16")
    assert mc[0]["note"].startswith("decode part of the spec not exercised")
    both = rows_from_samples("t", [mc_sample(0, [-1.0, -2.0], 0, 1.0)], "multiple_choice",
                             spec="w8/4g32-a16-kv:8g32@dyn")
    assert KV_NOTE in both[0]["note"] and mc[0]["note"] in both[0]["note"]
    gen = rows_from_samples("g", [{"doc_id": 0, "target": "4", "filtered_resps": ["4"], "exact_match": 1.0}],
                            "generate_until", spec="w8/4g32-a16-kv:16")
    assert gen[0]["note"] is None  # generation runs both phases


def test_generation_rows_carry_a_hash_of_their_generation_arguments():
    def gen(kwargs):
        return rows_from_samples("g", [{"doc_id": 0, "target": "4", "filtered_resps": ["4"], "exact_match": 1.0,
                                        "arguments": [("Q:", kwargs)]}], "generate_until")[0]["gen_args_hash"]

    a = gen({"until": ["\n"], "max_gen_toks": 48, "do_sample": False})
    assert a == gen({"do_sample": False, "max_gen_toks": 48, "until": ["\n"]})  # order does not matter
    assert a != gen({"until": ["\n"], "max_gen_toks": 3, "do_sample": False}) and a is not None
