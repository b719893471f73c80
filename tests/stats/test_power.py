"""Power and MDE: the docstring table against direct formulas, statsmodels and simulation."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from scipy import optimize, stats
from statsmodels.stats.power import NormalIndPower

import qdrift.stats.power as pw
from qdrift.stats.paired import clt_se, mcnemar_p
from qdrift.stats.power import mde_paired, mde_table, n_for_equivalence, power_equivalence, power_paired


def connor_power(n, delta, d, alpha=0.05):
    """Connor (1987), written out with scipy.stats.norm."""
    z, sd_alt = stats.norm.ppf(1 - alpha / 2), math.sqrt(d - delta**2)
    return stats.norm.cdf((delta * math.sqrt(n) - z * math.sqrt(d)) / sd_alt) + stats.norm.cdf(
        (-delta * math.sqrt(n) - z * math.sqrt(d)) / sd_alt
    )


def docstring_table():
    pattern = r"^\s+(\S+)\s+([\d,]+)\s+([\d.]+)\s+([\d,]+)\s+([\d.]+)\s+(yes|no)$"
    return [m.groups() for m in re.finditer(pattern, pw.__doc__, flags=re.M)]


def test_docstring_table_matches_direct_computation():
    table = docstring_table()
    assert [t[0] for t in table] == list(pw.BENCHMARKS)
    n_equiv = math.ceil(0.10 * (stats.norm.ppf(0.95) + stats.norm.ppf(0.90)) ** 2 / 0.01**2)
    result = mde_table()
    for name, n, mde, neq, peq, ok in table:
        n = int(n.replace(",", ""))
        direct = optimize.brentq(lambda e, n=n: connor_power(n, e, 0.10) - 0.8, 1e-9, 0.0999)
        row = result.row(benchmark=name)
        assert row["n"] == n == pw.BENCHMARKS[name]
        assert row["mde_points"] == pytest.approx(100 * direct, abs=1e-6)
        assert f"{row['mde_points']:.2f}" == mde
        assert row["n_equiv"] == n_equiv == int(neq.replace(",", ""))
        assert f"{row['power_equiv']:.2f}" == peq
        assert row["supportable"] == (ok == "yes") == (n >= n_equiv)
    assert "GSM8K" in result.summary()


def test_against_statsmodels_normal_power():
    # NormalIndPower with ratio=0 is the one-sample z test; with SD sqrt(d) under both hypotheses it is
    # the simple MDE form, which ignores the delta^2 term and so sits just above Connor's MDE.
    for n in pw.BENCHMARKS.values():
        es = NormalIndPower().solve_power(nobs1=n, alpha=0.05, power=0.8, ratio=0)  # solved to ~1e-5
        simple = (stats.norm.ppf(0.975) + stats.norm.ppf(0.8)) * math.sqrt(0.1 / n)
        assert es * math.sqrt(0.10) == pytest.approx(simple, rel=1e-4)
        assert mde_paired(n) < simple < 1.01 * mde_paired(n)
        assert power_paired(n, 0.02, 0.1) == pytest.approx(
            NormalIndPower().power(0.02 / math.sqrt(0.1), nobs1=n, alpha=0.05, ratio=0), abs=0.01
        )


def simulate(rng, n_sets, n, delta, d):
    u = rng.random((n_sets, n))
    p_a, p_b = (d - delta) / 2, (d + delta) / 2
    return (u >= p_a) * (u < p_a + p_b) * 1.0 - (u < p_a)


@pytest.mark.parametrize("n, delta, seed", [(1000, 0.03, 0), (1319, None, 1)])
def test_simulated_power_matches(n, delta, seed):
    delta = mde_paired(n) if delta is None else delta  # None: at GSM8K's MDE, power should be 0.8
    d = simulate(np.random.default_rng(seed), 3000, n, delta, 0.10)
    z_rej = (2 * stats.norm.sf(np.abs(d.mean(axis=1)) / clt_se(d)) < 0.05).mean()
    _, mid = mcnemar_p((d == -1).sum(axis=1), (d == 1).sum(axis=1))
    expected = power_paired(n, delta, 0.10)
    assert abs(z_rej - expected) < 0.03
    assert abs((mid < 0.05).mean() - expected) < 0.04


def test_equivalence_power_and_sample_size():
    n = n_for_equivalence(0.01, 0.10)
    assert power_equivalence(n, 0.01) >= 0.8 > power_equivalence(n - 1, 0.01)
    assert n_for_equivalence(0.01, 0.10, true_diff=0.003) > n  # a real small gap costs items
    assert power_equivalence(1319, 0.01) == 0.0  # the 90% CI is wider than ±1 point


def test_bad_input():
    with pytest.raises(ValueError, match="cannot exceed"):
        power_paired(100, 0.2, 0.1)
    with pytest.raises(ValueError, match="n_items"):
        mde_paired(0)
    with pytest.raises(ValueError, match="power"):
        mde_paired(100, power=0.01)
    with pytest.raises(ValueError, match="not inside"):
        n_for_equivalence(0.01, true_diff=0.01)
    with pytest.raises(ValueError, match="cannot reach"):
        mde_paired(2, discordance=0.1, power=0.99)


def test_n_for_equivalence_is_at_least_the_fewest_items_tost_can_decide_on():
    # A wide margin and almost no discordance: the normal approximation has the power at n = 1, but with
    # every item agreeing TOST's p is (1 - 0.3)^n, below 0.05 only from n = 9 on (0.7^8 = 0.058, 0.7^9 = 0.040).
    assert power_equivalence(8, 0.3, 0.01) == 0 and power_equivalence(9, 0.3, 0.01) >= 0.8
    assert n_for_equivalence(margin=0.3, discordance=0.01) == 9
