"""Repeated trials of each environment instance, and the pass@k / pass^k metrics over them.

    episodes = run_trials(lambda: HFPolicy(model, tok, prompt, temperature=1.0, seed=7),
                          "ledger", horizon=10, seeds=range(1_000_000, 1_000_020), n_trials=8)
    pass_at_k(episodes, 1), pass_hat_k(episodes, 8)

Seeding: trial t of every instance samples with policy seed `base_seed + t` (`base_seed` defaults to
the factory's policy's own `seed`), combined with the instance's environment seed exactly as a lone
`HFPolicy(seed=base_seed + t)` would. So a trial's trajectory does not depend on which batch it
ran in, and `n_trials=1` with the default base reproduces a plain `run_episodes` run.

pass@k (Chen et al. 2021): the chance that at least one of k trials drawn without replacement from
the n run succeeds, 1 - C(n-c, k) / C(n, k) per instance. pass^k (tau-bench, Yao et al. 2024): the
chance that all k succeed, C(c, k) / C(n, k). Both are averaged over instances, where an instance is
(env, horizon, seed). They are pure functions of the episode records.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from math import comb

from qdrift.envs.registry import load_environment, make_environment, repeated_instance
from qdrift.envs.runner import EpisodeRecord, run_episodes


class _TrialSeeds:
    """Wrap a policy so that `run_episodes` starts it with one policy seed per row."""

    def __init__(self, policy, policy_seeds: list[int]):
        self._policy = policy
        self._seeds = policy_seeds

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def start(self, conversations, episode_seeds):
        self._policy.start(conversations, episode_seeds, policy_seeds=self._seeds)


def _accepts_policy_seeds(policy) -> bool:
    try:
        return "policy_seeds" in inspect.signature(policy.start).parameters
    except (TypeError, ValueError):
        return False


def run_trials(policy_factory: Callable[[], object], env_ref: str, horizon: int, seeds: Iterable[int],
               n_trials: int, *, batch_size: int = 8, base_seed: int | None = None, split: str | None = None,
               first_id: int = 0, with_steps: bool = False, **knobs):
    """Run every instance `(env_ref, horizon, seed)` `n_trials` times; return the episode records.

    All (instance, trial) pairs, instance-major, go through `run_episodes` `batch_size` at a time,
    each batch with a fresh policy from `policy_factory()`; episode ids count from `first_id` in that
    order and `trial` is filled in. Trial t uses policy seed `base_seed + t` (see the module doc); the
    policy's `start` must accept `policy_seeds` (HFPolicy does). `knobs` go to `make_environment`.
    With `with_steps=True`, return (episode records, step records).
    """
    seeds = list(seeds)
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:  # the same instance twice would pass for more trials of it
        raise ValueError(f"seeds repeat {repeated}: each instance is run n_trials times once; list each seed once")
    same = repeated_instance(env_ref, load_environment(env_ref), seeds, knobs)
    if same:  # two seeds playing one instance would pass for two instances
        raise ValueError(same)
    if n_trials < 1:
        raise ValueError(f"n_trials must be >= 1, got {n_trials}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    pairs = [(s, t) for s in seeds for t in range(n_trials)]
    episodes: list[EpisodeRecord] = []
    steps = []
    for lo in range(0, len(pairs), batch_size):
        batch = pairs[lo:lo + batch_size]
        policy = policy_factory()
        if not _accepts_policy_seeds(policy):
            raise TypeError(f"{type(policy).__name__}.start() takes no `policy_seeds`, which run_trials needs to "
                            "give each trial its own sampling seed")
        base = getattr(policy, "seed", 0) if base_seed is None else base_seed
        envs = [make_environment(env_ref, horizon, s, split=split, **knobs) for s, _ in batch]
        trials = [t for _, t in batch]
        eps, st = run_episodes(_TrialSeeds(policy, [base + t for t in trials]), envs, trials=trials,
                               first_id=first_id + lo)
        episodes.extend(eps)
        steps.extend(st)
    return (episodes, steps) if with_steps else episodes


def _counts(records: Iterable[EpisodeRecord]) -> dict[tuple, tuple[int, int]]:
    """(env, horizon, seed) -> (trials n, successes c). A record of an (instance, trial) already seen is
    an error: counted again it would pass for another trial (records concatenated twice)."""
    out: dict[tuple, list[int]] = {}
    seen: set[tuple] = set()
    for r in records:
        trial = (r.env, r.horizon, r.seed, r.trial)
        if trial in seen:
            raise ValueError(f"two records of trial {r.trial} of instance {r.env} horizon={r.horizon} seed={r.seed}: "
                             "each trial must be counted once")
        seen.add(trial)
        nc = out.setdefault((r.env, r.horizon, r.seed), [0, 0])
        nc[0] += 1
        nc[1] += bool(r.success)
    return {key: (n, c) for key, (n, c) in out.items()}


def _check(counts: dict[tuple, tuple[int, int]], k: int) -> None:
    if not counts:
        raise ValueError("no episode records")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    for (env, horizon, seed), (n, _) in counts.items():
        if k > n:
            raise ValueError(f"k={k} exceeds n={n}, the number of trials of instance "
                             f"{env} horizon={horizon} seed={seed}")


def pass_at_k(records: Iterable[EpisodeRecord], k: int) -> float:
    """Unbiased pass@k: mean over instances of 1 - C(n-c, k) / C(n, k) (some of k trials succeed)."""
    counts = _counts(records)
    _check(counts, k)
    return sum(1.0 - comb(n - c, k) / comb(n, k) for n, c in counts.values()) / len(counts)


def pass_hat_k(records: Iterable[EpisodeRecord], k: int) -> float:
    """tau-bench's pass^k: mean over instances of C(c, k) / C(n, k) (all of k trials succeed)."""
    counts = _counts(records)
    _check(counts, k)
    return sum(comb(c, k) / comb(n, k) for n, c in counts.values()) / len(counts)
