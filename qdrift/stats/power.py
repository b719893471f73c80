"""How small a paired accuracy change a benchmark can see, and how many items "no change" needs.

Two configurations of one model disagree on few items; the discordance rate d (share of items where
exactly one is right) sets the noise. With true difference delta, one item's paired difference has
variance d - delta^2, and under the null (delta = 0) variance d. Power uses Connor's (1987) normal
approximation for McNemar / the paired z test, with the null SD sqrt(d) in the critical value and the
alternative SD sqrt(d - delta^2) around the truth (statsmodels' normal_power_het). The simpler
MDE = (z_{1-alpha/2} + z_power) * sqrt(d / n) ignores the delta^2 term and is slightly larger.
Equivalence is TOST on the paired difference (normal approximation).

mde_table() at alpha 0.05, power 0.8, discordance 10% (checked in tests/stats/test_power.py):

    benchmark          n   MDE (points)   n for ±1 point   power for ±1 point   ±1 point supportable
    GSM8K          1,319           2.44            8,564                 0.00   no
    ARC-Challenge  1,172           2.59            8,564                 0.00   no
    MMLU          14,042           0.75            8,564                 0.96   yes
    MMLU-Pro      12,032           0.81            8,564                 0.93   yes

So on GSM8K or ARC a quantized model 2.4-2.6 points worse still goes unnoticed one time in five,
and "within one point of the baseline" cannot be claimed from those sets alone at this discordance.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats
from statsmodels.stats.power import normal_power_het

from qdrift.stats.result import Result

BENCHMARKS = {"GSM8K": 1319, "ARC-Challenge": 1172, "MMLU": 14042, "MMLU-Pro": 12032}


def _check(n_items, discordance, alpha, power=None):
    if n_items < 1:
        raise ValueError(f"n_items must be positive, got {n_items}")
    if not 0 < discordance <= 1:
        raise ValueError(f"discordance must be in (0, 1], got {discordance}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if power is not None and not alpha < power < 1:
        raise ValueError(f"power must be in (alpha, 1), got {power}")


def power_paired(n_items: int, effect: float, discordance: float = 0.10, alpha: float = 0.05) -> float:
    """Power of the two-sided paired test (McNemar, normal approximation) to detect `effect`."""
    _check(n_items, discordance, alpha)
    if abs(effect) > discordance:
        raise ValueError(f"|effect| {abs(effect)} cannot exceed the discordance rate {discordance}")
    std_alt = math.sqrt(discordance - effect**2)
    if std_alt == 0:
        return 1.0
    return float(
        normal_power_het(
            abs(effect),
            n_items,
            alpha,
            std_null=math.sqrt(discordance),
            std_alternative=std_alt,
            alternative="two-sided",
        )
    )


def mde_paired(n_items: int, discordance: float = 0.10, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest paired difference (accuracy fraction) detected with `power`: power_paired inverted."""
    _check(n_items, discordance, alpha, power)
    hi = discordance * (1 - 1e-12)
    if power_paired(n_items, hi, discordance, alpha) < power:
        raise ValueError(
            f"{n_items} items cannot reach power {power} for any effect at discordance {discordance}"
        )
    return float(
        optimize.brentq(lambda e: power_paired(n_items, e, discordance, alpha) - power, 1e-12, hi, xtol=1e-12)
    )


def power_equivalence(
    n_items: int, margin: float, discordance: float = 0.10, alpha: float = 0.05, true_diff: float = 0.0
) -> float:
    """Chance TOST (level alpha) shows |diff| < margin when the truth is `true_diff` (normal approx.).

    By hand: statsmodels has TOST power only for proportions/rates of independent samples.
    """
    _check(n_items, discordance, alpha)
    if margin <= 0:
        raise ValueError(f"margin must be positive, got {margin}")
    if abs(true_diff) > discordance:
        raise ValueError(f"|true_diff| {abs(true_diff)} cannot exceed the discordance rate {discordance}")
    if n_items < fewest_for_equivalence(margin, alpha):
        return 0.0  # even n agreeing items leave p = (1 - margin)^n > alpha (stats.paired.tost_p)
    se = math.sqrt((discordance - true_diff**2) / n_items)
    if se == 0:
        return float(abs(true_diff) < margin)
    z = stats.norm.ppf(1 - alpha)
    return float(
        max(
            0.0,
            stats.norm.cdf((margin - true_diff) / se - z) - stats.norm.cdf((-margin - true_diff) / se + z),
        )
    )


def fewest_for_equivalence(margin: float, alpha: float = 0.05) -> int:
    """Items below which TOST can never show equivalence: with every item agreeing, the exact bound
    its zero-SE rule uses is p = (1 - margin)^n (`qdrift.stats.paired.tost_p`), which must reach alpha."""
    if margin >= 1:
        return 1
    return max(1, math.ceil(math.log(alpha) / math.log(1 - margin)))


def n_for_equivalence(
    margin: float, discordance: float = 0.10, alpha: float = 0.05, power: float = 0.8, true_diff: float = 0.0
) -> int:
    """Items needed for TOST to show equivalence within ±margin with `power`, truth `true_diff`."""
    _check(1, discordance, alpha, power)
    if abs(true_diff) >= margin:
        raise ValueError(f"true_diff {true_diff} is not inside ±{margin}: equivalence cannot be shown")

    def gap(n):
        return power_equivalence(n, margin, discordance, alpha, true_diff) - power

    fewest = fewest_for_equivalence(margin, alpha)
    if gap(fewest) >= 0:  # the fewest items that can show it already have the power (little discordance)
        return fewest
    hi = 2 * fewest
    while gap(hi) < 0:
        hi *= 2
    n = math.ceil(optimize.brentq(gap, fewest, hi, xtol=1e-6))
    while gap(n) < 0:  # guard against brentq landing a hair below the root
        n += 1
    return n


def mde_table(
    alpha: float = 0.05,
    power: float = 0.8,
    discordance: float = 0.10,
    margin: float = 0.01,
    benchmarks: dict[str, int] | None = None,
) -> Result:
    """MDE and equivalence sample size for the usual benchmark sizes (see the module docstring)."""
    benchmarks = BENCHMARKS if benchmarks is None else benchmarks
    n_eq = n_for_equivalence(margin, discordance, alpha, power)
    rows = []
    for name, n in benchmarks.items():
        rows.append(
            {
                "benchmark": name,
                "n": int(n),
                "mde_points": 100 * mde_paired(n, discordance, alpha, power),
                "n_equiv": n_eq,
                "power_equiv": power_equivalence(n, margin, discordance, alpha),
                "supportable": bool(n >= n_eq),
            }
        )
    simple = (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * np.sqrt(discordance)
    return Result(
        title="Minimum detectable paired difference",
        method="Connor (1987) normal approximation (statsmodels normal_power_het); TOST for equivalence",
        n={"benchmarks": len(rows)},
        rows=rows,
        notes=[
            f"alpha={alpha}, power={power}, discordance={discordance:.0%}, equivalence margin "
            f"±{100 * margin:g} point(s), true difference 0",
            f"simple form (z_a/2 + z_b) sqrt(d/n) = {simple:.4f}/sqrt(n), slightly above these MDEs",
            "'supportable': the benchmark has at least n_equiv items",
        ],
    )
