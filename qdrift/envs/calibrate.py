"""Set an environment's difficulty so that a given model's baseline per-step accuracy hits a target.

Why: compounding is measurable only where per-step accuracy is high but below 1 (0.95-0.995 gives
episode success from near 1 at short horizons to well below 0.5 at long ones). A fine-tuned model
lands wherever training left it; a difficulty knob (dict_sum's `vmax`, pointer chasing's
`distractors`, ...) moves it. `calibrate` searches a knob's candidate values, ordered from easiest
to hardest, by bisection for where accuracy crosses the target, measuring each on calibration
seeds (DEV_SEEDS_FROM and up: training seeds that fine-tuning never draws), never on the held-out
seeds a study evaluates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from qdrift.envs.registry import DEV_SEEDS_FROM, TRAIN_SEEDS_BELOW, load_environment, make_environment

REGIME = (0.95, 0.995)


def dev_seeds(n: int) -> list[int]:
    """The first `n` calibration seeds."""
    if not 1 <= n <= TRAIN_SEEDS_BELOW - DEV_SEEDS_FROM:
        raise ValueError(f"calibration seeds: need 1..{TRAIN_SEEDS_BELOW - DEV_SEEDS_FROM}, got {n}")
    return list(range(DEV_SEEDS_FROM, DEV_SEEDS_FROM + n))


def measure(policy_factory: Callable[[], object], env: str, horizon: int, seeds: Sequence[int],
            knobs: dict | None = None, batch_size: int = 16, split: str | None = None) -> dict:
    """Greedy episodes of (env, horizon, knobs) on `seeds`: per-step accuracy with its interval, success."""
    from statsmodels.stats.proportion import proportion_confint

    from qdrift.envs.trials import run_trials
    from qdrift.stats.accuracy import per_step_accuracy

    knobs = dict(knobs or {})
    episodes, steps = run_trials(policy_factory, env, horizon, seeds, 1, batch_size=batch_size, split=split,
                                 with_steps=True, **knobs)
    acc = per_step_accuracy([s.row() for s in steps]).rows[0]
    wins = sum(e.success for e in episodes)
    lo, hi = proportion_confint(wins, len(episodes), method="wilson")
    return {"env": env, "knobs": knobs, "horizon": horizon, "seeds": [min(seeds), max(seeds)], "n_seeds": len(seeds),
            "per_step_accuracy": acc["estimate"], "per_step_ci": list(acc["ci"]), "steps": acc["steps"],
            "success": wins / len(episodes), "success_ci": [float(lo), float(hi)], "episodes": len(episodes)}


@dataclass
class Calibration:
    env: str
    knob: str
    target: float
    horizon: int
    measured: list[dict] = field(default_factory=list)  # in the order measured
    chosen: dict | None = None
    note: str = ""
    values_order: list = field(default_factory=list, repr=False)  # the candidates, easiest first

    def to_dict(self) -> dict:
        return {"env": self.env, "knob": self.knob, "target": self.target, "horizon": self.horizon,
                "measured": self.measured, "chosen": self.chosen, "note": self.note}

    def summary(self) -> str:
        lines = [f"calibration of {self.env}.{self.knob} to per-step accuracy {self.target} at L = {self.horizon}:"]
        for m in sorted(self.measured, key=lambda m: self.values_order.index(m["knobs"][self.knob])):
            lo, hi = m["per_step_ci"]
            mark = "  <- chosen" if m is self.chosen else ""
            lines.append(f"  {self.knob}={m['knobs'][self.knob]}: {m['per_step_accuracy']:.4f} [{lo:.4f}, {hi:.4f}] "
                         f"({m['steps']} steps, success {m['success']:.2f}){mark}")
        lines.append(self.note)
        return "\n".join(lines)


def check_knob(env: str, knob: str, values: Sequence[int], horizon: int, fixed: dict) -> None:
    """ValueError naming the problem when `knob` or a value is not valid for `env`."""
    cls = load_environment(env)
    valid = getattr(cls, "knobs", {})
    if knob not in valid:
        raise ValueError(f"{env} has no knob {knob!r}; its knobs: {', '.join(valid) or 'none'}")
    if knob in fixed:
        raise ValueError(f"knob {knob!r} is both calibrated and fixed (--knobs); give it once")
    if not values or len(set(values)) != len(values):
        raise ValueError(f"give distinct candidate values of {knob}, easiest first (one value: measure it); got {list(values)}")
    for v in values:
        make_environment(env, horizon=horizon, seed=DEV_SEEDS_FROM, **{**fixed, knob: v})  # range errors name the knob


def calibrate(policy_factory: Callable[[], object], env: str, knob: str, values: Sequence[int], target: float,
              horizon: int, n_seeds: int = 16, fixed: dict | None = None, batch_size: int = 16,
              log: Callable[[str], None] | None = None) -> Calibration:
    """Find the value of `knob` (candidates `values`, easiest first) whose accuracy is nearest `target`.

    Assumes accuracy does not rise along `values`; with one value, measures it; else bisects for the last value at or above the target
    and its harder neighbour, measures both, and chooses the nearer one (a value that misses the
    target band `REGIME` is still chosen, with a note saying how far it got).
    """
    fixed = dict(fixed or {})
    if not 0 < target < 1:
        raise ValueError(f"target must be a per-step accuracy in (0, 1), got {target}")
    values = list(values)
    check_knob(env, knob, values, horizon, fixed)
    seeds = dev_seeds(n_seeds)
    cal = Calibration(env, knob, target, horizon, values_order=values)
    cache: dict[int, dict] = {}

    def acc(i: int) -> float:
        if i not in cache:
            m = measure(policy_factory, env, horizon, seeds, {**fixed, knob: values[i]}, batch_size)
            cache[i] = m
            cal.measured.append(m)
            if log:
                log(f"{env} {knob}={values[i]} L={horizon}: per-step {m['per_step_accuracy']:.4f}, "
                    f"success {m['success']:.2f}")
        return cache[i]["per_step_accuracy"]

    lo, hi = 0, len(values) - 1
    if lo == hi:  # one value: measured, and placed against the target
        a = acc(lo)
        cal.chosen = cache[lo]
        cal.note = f"{knob}={values[lo]}: per-step accuracy {a:.4f} {'at or above' if a >= target else 'below'} the target {target}"
    elif acc(lo) < target:
        cal.chosen, cal.note = cache[lo], (f"the easiest value {knob}={values[lo]} is already below the target "
                                           f"({acc(lo):.4f} < {target}); give easier values")
    elif acc(hi) >= target:
        cal.chosen, cal.note = cache[hi], (f"the hardest value {knob}={values[hi]} is still at or above the target "
                                           f"({acc(hi):.4f} >= {target}); give harder values")
    else:
        while hi - lo > 1:  # invariant: acc(lo) >= target > acc(hi)
            mid = (lo + hi) // 2
            if acc(mid) >= target:
                lo = mid
            else:
                hi = mid
        best = min((lo, hi), key=lambda i: abs(acc(i) - target))
        cal.chosen = cache[best]
        cal.note = f"{knob}={values[best]}: per-step accuracy {acc(best):.4f} against the target {target}"
    a = cal.chosen["per_step_accuracy"]
    if not REGIME[0] <= a <= REGIME[1]:
        cal.note += f"; outside the measurable regime {REGIME[0]}-{REGIME[1]}"
    return cal
