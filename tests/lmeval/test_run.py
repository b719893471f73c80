"""run_cell on the embedded organism: rows, restore, pairing, and the KV note."""

import pytest
import torch

pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'qdrift[lmeval]')")

from qdrift.lmeval import compare_short_form, run_cell  # noqa: E402
from qdrift.lmeval.rows import KV_NOTE  # noqa: E402
from qdrift.quant import spec_of  # noqa: E402
from qdrift.stats import paired_from_rows  # noqa: E402

TASKS = ["organism_keys_mc", "organism_keys_gen"]


def test_run_cell_returns_rows_and_leaves_the_model_as_it_was(organism):
    model, tok = organism
    before = model.model.layers[0].mlp.up_proj.weight.clone()
    base = run_cell(model, tok, TASKS, None, limit=3, name="organism")
    var = run_cell(model, tok, TASKS, "w4g32-a16-kv:16", limit=3, name="organism")
    assert spec_of(model) is None and torch.equal(model.model.layers[0].mlp.up_proj.weight, before)
    assert len(base) == len(var) == 6
    assert {r["spec"] for r in var} == {"w4g32-a16-kv:16"}
    assert sum(r["correct"] for r in base if r["task"] == "organism_keys_mc") >= 2  # it can do its own task
    res = paired_from_rows(base + var, "spec", "w16-a16-kv:16", "w4g32-a16-kv:16",
                           item_cols=("task", "filter", "doc_id"), outcome="correct", n_boot=0)
    assert res.n["items"] == 6
    assert compare_short_form(base, var).n == {"items": 6, "tasks": 2, "mc_items": 3}


def test_a_kv_only_spec_leaves_loglikelihoods_unchanged_and_results_say_so(tiny):
    base = run_cell(*tiny, "organism_keys_mc", None, limit=2, name="tiny")
    kv = run_cell(*tiny, "organism_keys_mc", "w16-a16-kv:4g32@dyn", limit=2, name="tiny")
    assert [r["choice_loglik"] for r in kv] == [r["choice_loglik"] for r in base]
    assert all(r["note"] == KV_NOTE and not r["kv_exercised"] for r in kv)
    assert KV_NOTE in compare_short_form(base, kv).summary()


def test_a_kv_spec_does_reach_generation(tiny):
    rows = run_cell(*tiny, "organism_keys_gen", "w16-a16-kv:2g32@dyn", limit=1, name="tiny",
                    gen_kwargs={"max_gen_toks": 4})
    assert rows[0]["kv_exercised"] and rows[0]["note"] is None
