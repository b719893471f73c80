"""Paired comparison: published McNemar examples, simulated size / coverage, and bad input."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.weightstats import ttost_paired

from qdrift.stats.paired import (
    PairedResult,
    clt_se,
    cluster_se,
    mcnemar_p,
    paired_comparison,
    paired_from_rows,
    tost_p,
)
from qdrift.stats.power import n_for_equivalence


def from_table(n11, n10, n01, n00):
    """Aligned outcome vectors (a, b) for a 2x2 table with rows a = 1/0 and columns b = 1/0."""
    a = np.repeat([1, 1, 0, 0], [n11, n10, n01, n00])
    b = np.repeat([1, 0, 1, 0], [n11, n10, n01, n00])
    return a, b


def simulate(rng, n_sets, n, p_a_only, p_b_only):
    """(n_sets, n) paired differences b - a with the given discordant probabilities."""
    u = rng.random((n_sets, n))
    return (u >= p_a_only) * (u < p_a_only + p_b_only) * 1.0 - (u < p_a_only)


# ---------------------------------------------------------------- published examples


def test_mcnemar_fagerland_example():
    # Fagerland, Lydersen & Laake (2013), BMC Med Res Methodol 13:91, Table 1 (Bentur et al. 2009):
    # AHR before/after stem cell transplantation in 21 children, discordant 1 vs 7. They report the
    # exact conditional p = 0.070 and mid-p = 0.039.
    a, b = from_table(1, 1, 7, 12)
    r = paired_comparison(a, b, n_boot=0)
    assert r.row(quantity="McNemar exact")["p_value"] == pytest.approx(0.070, abs=5e-4)
    assert r.row(quantity="McNemar mid-p")["p_value"] == pytest.approx(0.039, abs=5e-4)
    assert r.mcnemar_p == pytest.approx(18 / 256)  # 2 * P(X <= 1), X ~ Binom(8, 1/2)


def test_mcnemar_table_matches_r_documentation_example():
    # R ?mcnemar.test (Agresti 1990, p. 350, presidential approval, 1st vs 2nd survey): approve->approve
    # 794, approve->disapprove 150, disapprove->approve 86, disapprove->disapprove 570;
    # R prints "McNemar's chi-squared = 16.818, df = 1, p-value = 4.115e-05".
    a, b = from_table(794, 150, 86, 570)
    r = paired_comparison(a, b, n_boot=0)
    res = mcnemar(r.extra["table"], exact=False, correction=True)
    assert res.statistic == pytest.approx(16.818, abs=1e-3)
    assert res.pvalue == pytest.approx(4.115e-05, rel=1e-3)
    assert r.diff == pytest.approx((86 - 150) / 1600)
    assert r.mcnemar_p == pytest.approx(2 * stats.binom.cdf(86, 236, 0.5))
    assert r.mcnemar_p < 1e-4
    # both asymptotic rows, as the textbooks print them: Agresti's table (uncorrected) 17.356, R's 16.818
    plain, corrected = r.row(quantity="McNemar chi-square"), r.row(quantity="McNemar chi-square (corrected)")
    assert "chi2 = 17.356, df = 1" in plain["detail"] and "chi2 = 16.818, df = 1" in corrected["detail"]
    assert plain["p_value"] == pytest.approx(stats.chi2.sf((150 - 86) ** 2 / 236, 1))
    assert corrected["p_value"] == pytest.approx(4.115e-05, rel=1e-3)


def test_vectorised_helpers_match_statsmodels():
    rng = np.random.default_rng(3)
    n01, n10 = rng.integers(0, 40, 200), rng.integers(0, 40, 200)
    exact, mid = mcnemar_p(n01, n10)
    for i in range(0, 200, 7):
        ref = 1.0 if n01[i] + n10[i] == 0 else mcnemar([[5, n01[i]], [n10[i], 5]], exact=True).pvalue
        assert exact[i] == pytest.approx(ref, abs=1e-12)
    assert np.all((mid <= exact + 1e-12) & (mid >= 0))

    x = rng.normal(size=300) + np.repeat(rng.normal(size=30), 10)
    groups = np.repeat(np.arange(30), 10)
    fit = sm.OLS(x, np.ones_like(x)).fit(cov_type="cluster", cov_kwds={"groups": groups})
    assert cluster_se(x, groups) == pytest.approx(fit.bse[0], rel=1e-10)

    a, b = rng.integers(0, 2, 400), rng.integers(0, 2, 400)
    d = (b - a).astype(float)
    ref = ttost_paired(b.astype(float), a.astype(float), -0.1, 0.1)[0]
    assert tost_p(d.mean(), clt_se(d), 0.1, df=399) == pytest.approx(ref, rel=1e-10)


# ---------------------------------------------------------------- simulation


def test_type_one_error_near_alpha_under_null():
    rng = np.random.default_rng(0)
    d = simulate(rng, 2000, 1000, 0.05, 0.05)  # 10% discordance, no effect
    diff, se = d.mean(axis=1), clt_se(d)
    p_z = 2 * stats.norm.sf(np.abs(diff) / se)
    exact, mid = mcnemar_p((d == -1).sum(axis=1), (d == 1).sum(axis=1))
    for p in (p_z, exact, mid):
        assert 0.03 <= (p < 0.05).mean() <= 0.07
    # the public function computes the same p-values as the vectorised helpers
    for i in range(3):
        a = (d[i] == -1).astype(int)
        r = paired_comparison(a, a + d[i], n_boot=0)
        assert r.row(quantity="difference (CLT)")["p_value"] == pytest.approx(p_z[i])
        assert r.mcnemar_p == pytest.approx(exact[i])
        assert r.row(quantity="McNemar mid-p")["p_value"] == pytest.approx(mid[i])


def test_tost_size_and_power():
    margin, rng = 0.02, np.random.default_rng(10)
    n = n_for_equivalence(margin, 0.10)  # 2,141 items for 80% power
    d = simulate(rng, 3000, n, 0.05, 0.05)  # true difference 0
    shown = tost_p(d.mean(axis=1), clt_se(d), margin, df=n - 1) < 0.05
    assert abs(shown.mean() - 0.80) < 0.03  # about 4 Monte Carlo SEs
    d = simulate(rng, 1500, n, 0.04, 0.06)  # true difference = margin
    assert (tost_p(d.mean(axis=1), clt_se(d), margin, df=n - 1) < 0.05).mean() <= 0.06


def test_cluster_se_exceeds_clt_and_covers():
    rng = np.random.default_rng(2)
    n_sets, n_groups, size, truth = 1000, 50, 20, 0.02
    codes = np.repeat(np.arange(n_groups), size)
    # each template shifts the difference by ±0.2: items of one template move together
    effect = truth + 0.2 * rng.choice([-1, 1], size=(n_sets, n_groups))[:, codes]
    d = simulate(rng, n_sets, n_groups * size, 0.25 - effect / 2, 0.25 + effect / 2)
    diff, cse, se = d.mean(axis=1), cluster_se(d, codes), clt_se(d)
    assert np.mean(cse) > 1.5 * np.mean(se)
    t = stats.t.ppf(0.975, n_groups - 1)
    coverage = (np.abs(diff - truth) <= t * cse).mean()
    assert 0.925 <= coverage <= 0.97
    assert (np.abs(diff - truth) <= 1.96 * se).mean() < 0.85  # the CLT CI under-covers here
    a = (d[0] == -1).astype(int)
    r = paired_comparison(a, a + d[0], clusters=codes, n_boot=500)
    row = r.row(quantity="difference (cluster-robust)")
    assert row["se"] == pytest.approx(cse[0]) and row["se"] > r.row(quantity="difference (CLT)")["se"]
    boot = r.row(quantity="difference (bootstrap)")
    assert boot["se"] == pytest.approx(row["se"], rel=0.25)


def test_bootstrap_agrees_with_clt_for_items():
    rng = np.random.default_rng(4)
    d = simulate(rng, 1, 2000, 0.04, 0.07)[0]
    a = (d == -1).astype(int)
    r = paired_comparison(a, a + d, n_boot=4000, seed=1)
    clt, boot = r.row(quantity="difference (CLT)"), r.row(quantity="difference (bootstrap)")
    assert boot["se"] == pytest.approx(clt["se"], rel=0.1)
    assert boot["ci_low"] == pytest.approx(clt["ci_low"], abs=0.003)


def test_tost_conclusions_and_plot():
    a, b = from_table(700, 50, 52, 198)
    r = paired_comparison(a, b, margin=0.05, n_boot=200)
    assert r.conclusion == "equivalent within ±0.05" and r.row(quantity="TOST ±0.05")["p_value"] < 0.05
    assert paired_comparison(a, b, margin=0.005, n_boot=0).conclusion == "cannot claim equivalence"
    rc = paired_comparison(a, b, clusters=np.arange(1000) % 40, margin=0.05, n_boot=0)
    assert rc.row(quantity="TOST ±0.05")["se"] == rc.row(quantity="difference (cluster-robust)")["se"]
    ax = r.plot()
    assert len(ax.get_yticks()) == 3
    assert "TOST" in r.summary() and isinstance(r.to_frame(), pd.DataFrame)


# ---------------------------------------------------------------- bad input


def test_bad_input():
    with pytest.raises(ValueError, match="paired"):
        paired_comparison([1, 0, 1], [1, 0])
    with pytest.raises(ValueError, match="empty"):
        paired_comparison([], [])
    with pytest.raises(ValueError, match="single cluster"):
        paired_comparison([1, 0, 1], [1, 1, 1], clusters=["t", "t", "t"])
    with pytest.raises(ValueError, match="NaN"):
        paired_comparison([1, np.nan], [1, 0])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        paired_comparison([1, 2], [1, 0])
    with pytest.raises(ValueError, match="duplicated item"):
        paired_comparison([1, 0, 1], [1, 1, 1], items=["q1", "q2", "q1"])
    with pytest.raises(ValueError, match="McNemar needs 0/1"):
        paired_comparison([0.5, 0.2, 0.9], [0.4, 0.3, 1.0], mcnemar=True)


def test_float_scores_skip_mcnemar_with_note():
    r = paired_comparison([0.5, 0.2, 0.9, 0.1], [0.4, 0.3, 1.0, 0.0], n_boot=100)
    assert any("McNemar skipped" in n for n in r.notes)
    with pytest.raises(ValueError, match="no McNemar"):
        _ = r.mcnemar_p
    assert r.diff == pytest.approx(0.0)


def test_identical_outcomes_are_defined_and_not_called_equivalent_from_a_zero_se():
    a = [1, 0, 1, 1, 0]
    r = paired_comparison(a, a, clusters=[0, 0, 1, 1, 2], margin=0.01)
    assert r.diff == 0 and r.row(quantity="difference (CLT)")["se"] == 0
    assert r.mcnemar_p == 1.0 and r.row(quantity="McNemar mid-p")["p_value"] == 1.0
    assert r.row(quantity="difference (CLT)")["p_value"] == 1.0
    # five agreeing items in three clusters say little: the exact bound over the clusters
    assert r.conclusion == "cannot claim equivalence"
    assert r.row(quantity="TOST ±0.01")["p_value"] == pytest.approx(0.99**3)
    assert any("SE 0" in n for n in r.notes) and any("no discordant" in n for n in r.notes)
    values = [v for row in r.rows for v in row.values() if isinstance(v, float)]
    assert not np.isnan(values).any()


def test_tost_keeps_its_size_when_the_configs_rarely_disagree():
    # b is wrong on 2% of the items a gets right: the true difference (-0.02) is outside ±0.01, so
    # "equivalent" may be said in at most alpha of the datasets. A zero SE (no disagreement seen, 13%
    # of datasets at n = 100) used to say it every time.
    rng = np.random.default_rng(0)
    said = 0
    for _ in range(400):
        a = np.ones(100)
        b = (rng.random(100) >= 0.02).astype(float)
        said += paired_comparison(a, b, margin=0.01, n_boot=0).conclusion != "cannot claim equivalence"
    assert said / 400 <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 400)


def test_enough_agreement_is_equivalence_with_the_exact_clopper_pearson_bound():
    from statsmodels.stats.proportion import proportion_confint

    a = np.r_[np.ones(700), np.zeros(300)]
    r = paired_comparison(a, a, margin=0.01, n_boot=0)
    tost = r.row(quantity="TOST ±0.01")
    upper = proportion_confint(0, 1000, alpha=0.10, method="beta")[1]  # one-sided 95%: 1 - 0.05^(1/1000)
    assert tost["ci_high"] == pytest.approx(upper) and tost["ci_low"] == pytest.approx(-upper)
    assert tost["p_value"] == pytest.approx(0.99**1000) and r.conclusion == "equivalent within ±0.01"


def test_a_cluster_se_that_cancels_to_zero_does_not_make_equivalence():
    # clusters 0-2 each hold one item only a gets right and one only b gets right: every cluster's
    # mean difference is 0, so the sandwich SE is 0 although six items differ
    a, b = np.ones(100), np.ones(100)
    for g in range(3):
        a[10 * g], b[10 * g + 1] = 0, 0
    clusters = np.repeat(np.arange(10), 10)
    r = paired_comparison(a, b, clusters=clusters, margin=0.01, n_boot=0)
    assert r.row(quantity="difference (cluster-robust)")["se"] == 0
    assert r.conclusion == "cannot claim equivalence"
    assert any("cluster-robust SE is 0" in n for n in r.notes)
    # TOST rests on the item-level (CLT) SE: a zero SE alone would also say "cannot", from p = 1
    clt = r.row(quantity="difference (CLT)")["se"]
    tost = r.row(quantity="TOST ±0.01")
    assert clt > 0 and tost["se"] == clt


def test_accuracy_intervals_are_wilson_inside_zero_one():
    a = np.r_[np.ones(47), np.zeros(3)]
    r = paired_comparison(a, a, n_boot=0)
    row = r.row(quantity="accuracy a")
    z, n, p = stats.norm.ppf(0.975), 50, 0.94
    centre = (p + z**2 / (2 * n)) / (1 + z**2 / n)
    half = z / (1 + z**2 / n) * np.sqrt(p * (1 - p) / n + z**2 / (4 * n**2))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((centre - half, centre + half))
    assert row["ci_high"] < 1


def test_mcnemar_false_leaves_mcnemar_out():
    r = paired_comparison([1, 0, 1, 1], [1, 1, 0, 1], mcnemar=False, n_boot=0)
    assert not any(row["quantity"].startswith("McNemar") for row in r.rows)


# ---------------------------------------------------------------- tidy rows


def episode_rows():
    rng = np.random.default_rng(5)
    rows = []
    for env in ("calc", "files"):
        for seed in range(30):
            ok = bool(rng.random() < 0.7)
            for config in ("bf16", "int4"):
                flip = rng.random() < 0.15
                rows.append(
                    {
                        "episode": len(rows),
                        "env": env,
                        "horizon": 8,
                        "seed": seed,
                        "trial": 0,
                        "success": ok ^ flip,
                        "steps": 5,
                        "first_error_step": None,
                        "stop_reason": "done",
                        "config": config,
                    }
                )
    return rows


def test_paired_from_rows_matches_direct_call():
    rows = episode_rows()
    r = paired_from_rows(
        rows, "config", "bf16", "int4", ("env", "horizon", "seed", "trial"), cluster_col="env", n_boot=0
    )
    assert isinstance(r, PairedResult) and r.n["items"] == 60 and r.n["clusters"] == 2
    df = pd.DataFrame(rows).sort_values(["env", "seed"])
    a = df[df.config == "bf16"].success.to_numpy(float)
    b = df[df.config == "int4"].success.to_numpy(float)
    assert r.diff == pytest.approx(b.mean() - a.mean())
    direct = paired_comparison(a, b, n_boot=0)
    assert r.mcnemar_p == pytest.approx(direct.mcnemar_p)
    assert "int4 vs bf16" in r.title
    r2 = paired_from_rows(pd.DataFrame(rows), "config", "bf16", "int4", ["env", "seed"], n_boot=0)
    assert r2.diff == pytest.approx(r.diff)


def test_paired_from_rows_rejects_unpaired_and_duplicates():
    rows = episode_rows()
    cols = ("env", "horizon", "seed", "trial")
    with pytest.raises(ValueError, match=r"unpaired items: 1 only in 'bf16', 0 only in 'int4', e\.g\."):
        paired_from_rows(rows[:-1], "config", "bf16", "int4", cols)
    with pytest.raises(ValueError, match="1 items appear more than once for 'int4'"):
        paired_from_rows(rows + [dict(rows[1])], "config", "bf16", "int4", cols)
    with pytest.raises(ValueError, match="configs present"):
        paired_from_rows(rows, "config", "bf16", "fp8", cols)
    with pytest.raises(ValueError, match="lack columns"):
        paired_from_rows(rows, "quant", "bf16", "int4", cols)


def test_the_shared_tost_helper_never_calls_a_zero_se_equivalent_by_itself():
    # the vectorised helper the simulations use carries the same rule as paired_comparison
    assert tost_p(0.0, 0.0, 0.01) == 1.0  # no units: nothing to go on
    assert tost_p(0.005, 0.0, 0.01, units=10_000) == 1.0  # a constant nonzero difference: nothing to test
    assert tost_p(0.0, 0.0, 0.01, units=1000) == pytest.approx(0.99**1000)
