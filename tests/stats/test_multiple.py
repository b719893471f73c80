"""Multiple-testing adjustment over dicts, lists and PairedResults."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from qdrift.stats.multiple import METHODS, adjust
from qdrift.stats.paired import paired_comparison


def test_holm_by_hand_and_names():
    r = adjust({"int8": 0.01, "int4": 0.04, "fp8": 0.03}, method="holm")
    # Holm: sorted 0.01, 0.03, 0.04 -> 3*0.01, max(0.03, 2*0.03), max(0.06, 1*0.04)
    assert r.row(name="int8")["p_adjusted"] == pytest.approx(0.03)
    assert r.row(name="fp8")["p_adjusted"] == pytest.approx(0.06)
    assert r.row(name="int4")["p_adjusted"] == pytest.approx(0.06)
    assert [row["reject"] for row in r.rows] == [True, False, False]
    assert r.n == {"tests": 3, "rejected": 1}


@pytest.mark.parametrize("method", METHODS)
def test_every_method_matches_statsmodels(method):
    ps = list(np.random.default_rng(0).uniform(0, 0.2, 12))
    reject, p_adj, _, _ = multipletests(ps, alpha=0.05, method=method)
    r = adjust(ps, method=method)
    assert [row["p_adjusted"] for row in r.rows] == pytest.approx(list(p_adj))
    assert [row["reject"] for row in r.rows] == list(reject)
    assert r.rows[0]["name"] == "p0"


def test_paired_results_use_mcnemar_p():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 2, 300)
    results = []
    for flip in (0.05, 0.2):
        b = a.copy()
        idx = rng.random(300) < flip
        b[idx] = 0
        results.append(paired_comparison(a, b, n_boot=0, b_name=f"flip{flip}"))
    r = adjust(results, method="fdr_bh")
    assert [row["p_raw"] for row in r.rows] == [res.mcnemar_p for res in results]
    assert "McNemar" in r.notes[0] and r.rows[1]["name"].endswith("flip0.2 vs a")


def test_bad_input():
    with pytest.raises(ValueError, match="valid: bonferroni.*fdr_bh"):
        adjust([0.1], method="benjamini")
    with pytest.raises(ValueError, match="no p-values"):
        adjust([])
    with pytest.raises(ValueError, match="outside"):
        adjust({"x": 1.5})
    with pytest.raises(ValueError, match="outside"):
        adjust([float("nan")])



def test_paired_results_stand_for_the_test_that_fits_them():
    rng = np.random.default_rng(2)
    a = rng.integers(0, 2, 200).astype(float)
    b = np.where(rng.random(200) < 0.1, 0.0, a)
    clustered = paired_comparison(a, b, clusters=np.repeat(np.arange(20), 10), n_boot=0)
    plain = paired_comparison(a, b, n_boot=0)
    scores = paired_comparison([0.2, 0.5, 0.7], [0.3, 0.5, 0.9], n_boot=0)
    r = adjust({"clustered": clustered, "plain": plain, "scores": scores}, method="bonferroni")
    # clusters given: their t test, not McNemar (which treats items as independent); floats: the CLT z
    assert r.row(name="clustered")["p_raw"] == clustered.row(quantity="difference (cluster-robust)")["p_value"]
    assert r.row(name="plain")["p_raw"] == plain.mcnemar_p
    assert r.row(name="scores")["p_raw"] == scores.row(quantity="difference (CLT)")["p_value"]
    assert "cluster-robust t, McNemar exact, CLT z" in r.notes[0]
