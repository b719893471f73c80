"""How large a change in the per-step error rate a study of n seeds can see, before it runs.

A long episode per seed exposes an agent step after step until its first error (or the end, L):
the first-error rate p = errors / steps at risk (`qdrift.stats.step_error_ratio`) is a Poisson-type
rate, and a variant's effect is the ratio of its rate to the baseline's. Power comes from
statsmodels' two-sample Poisson rate-ratio power (Zhu & Lakkis), with each arm's exposure the
expected steps at risk of its n episodes. The function takes one exposure for both arms; the
variant's (smaller, since it errs more often) is used for both, so the power stated is a lower
bound. Pairing (the same seeds in both arms) is ignored, which is conservative too.
"""

from __future__ import annotations

from scipy import optimize
from statsmodels.stats.rates import power_poisson_ratio_2indep

from qdrift.stats.result import Result


def steps_at_risk(p_step: float, horizon: int) -> float:
    """Expected steps until the first error or the end: sum over t < L of (1 - p)^t."""
    q = 1.0 - p_step
    return float(horizon) if p_step == 0 else (1.0 - q ** horizon) / p_step


def _check(n_seeds, p_step, horizon, alpha, power=None):
    if n_seeds < 2:
        raise ValueError(f"n_seeds must be >= 2, got {n_seeds}")
    if not 0 < p_step < 1:
        raise ValueError(f"p_step (the baseline's per-step first-error rate) must be in (0, 1), got {p_step}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    if not 0 < alpha < 1 or (power is not None and not alpha < power < 1):
        raise ValueError(f"need 0 < alpha < power < 1, got alpha={alpha}, power={power}")


def power_step_error_ratio(n_seeds: int, p_step: float, ratio: float, horizon: int, alpha: float = 0.05) -> float:
    """Power of the two-sided rate-ratio test to see a variant whose per-step error rate is `ratio` x the baseline's."""
    _check(n_seeds, p_step, horizon, alpha)
    p1 = min(p_step * ratio, 1 - 1e-9)
    exposure = steps_at_risk(max(p1, p_step), horizon)
    return float(power_poisson_ratio_2indep(p1, p_step, n_seeds, exposure=exposure, value=1.0, alpha=alpha,
                                            alternative="two-sided", method_var="score", return_results=False))


def mde_step_error_ratio(n_seeds: int, p_step: float, horizon: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest ratio > 1 of per-step error rates the study detects with `power`."""
    _check(n_seeds, p_step, horizon, alpha, power)
    hi = 2.0
    while power_step_error_ratio(n_seeds, p_step, hi, horizon, alpha) < power:
        hi *= 2
        if p_step * hi >= 1:
            return float("inf")
    return float(optimize.brentq(lambda r: power_step_error_ratio(n_seeds, p_step, r, horizon, alpha) - power,
                                 1.0 + 1e-9, hi, xtol=1e-6))


def step_power_table(p_step: float, horizon: int, seeds=(50, 100, 200, 400), alpha: float = 0.05,
                     power: float = 0.8) -> Result:
    """MDE of the per-step error-rate ratio at several seed counts, for a study plan."""
    rows = [{"seeds": n, "p_step": p_step, "horizon": horizon,
             "expected_first_errors": n * (1 - (1 - p_step) ** horizon),
             "mde_ratio": mde_step_error_ratio(n, p_step, horizon, alpha, power)} for n in seeds]
    return Result(title="Minimum detectable per-step error-rate ratio",
                  method="two-sample Poisson rate ratio, score variance (statsmodels power_poisson_ratio_2indep)",
                  n={"designs": len(rows)}, rows=rows,
                  notes=[f"alpha={alpha} two-sided, power={power}; exposure = expected steps at risk of the "
                         "variant arm for both arms and pairing ignored: the MDEs are upper bounds"])
