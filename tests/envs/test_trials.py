"""Repeated trials: pass@k and pass^k on hand-made records, and seeded trials end to end."""

from math import comb

import pytest

from qdrift.backends.hf import HFPolicy
from qdrift.envs.prompting import tool_prompt_for
from qdrift.envs.registry import make_environment
from qdrift.envs.runner import EpisodeRecord, run_episodes
from qdrift.envs.trials import pass_at_k, pass_hat_k, run_trials
from qdrift.tiny import tiny_model, tiny_tokenizer


def records(outcomes: dict[int, list[bool]], env: str = "ledger", horizon: int = 5):
    out, i = [], 0
    for seed, results in outcomes.items():
        for t, ok in enumerate(results):
            out.append(EpisodeRecord(i, env, horizon, seed, t, ok, horizon, None if ok else 0,
                                     "done" if ok else "max_steps"))
            i += 1
    return out


# Instance 1: 2 of 4 succeed; instance 2: none; instance 3: all four.
HAND = records({1: [True, False, True, False], 2: [False] * 4, 3: [True] * 4})


def test_pass_at_k_matches_hand_computed_values():
    assert pass_at_k(HAND, 1) == pytest.approx((2 / 4 + 0 + 1) / 3)
    assert pass_at_k(HAND, 2) == pytest.approx((1 - 1 / 6 + 0 + 1) / 3)  # 1 - C(2,2)/C(4,2)
    assert pass_at_k(HAND, 3) == pytest.approx((1 + 0 + 1) / 3)  # C(2,3) = 0
    assert pass_at_k(HAND, 4) == pytest.approx(2 / 3)


def test_pass_hat_k_matches_hand_computed_values():
    assert pass_hat_k(HAND, 1) == pytest.approx(0.5)
    assert pass_hat_k(HAND, 2) == pytest.approx((1 / 6 + 0 + 1) / 3)  # C(2,2)/C(4,2)
    assert pass_hat_k(HAND, 3) == pytest.approx(1 / 3)
    assert pass_hat_k(HAND, 4) == pytest.approx(1 / 3)


def test_pass_at_k_and_pass_hat_k_bracket_each_other_and_agree_at_k_1():
    recs = records({7: [True, False, False, True, True], 8: [False, True, False, False, False]})
    assert pass_at_k(recs, 1) == pytest.approx(pass_hat_k(recs, 1)) == pytest.approx((3 / 5 + 1 / 5) / 2)
    for k in range(1, 6):
        assert pass_hat_k(recs, k) <= pass_at_k(recs, 1) + 1e-12 <= pass_at_k(recs, k) + 2e-12
    expected = ((1 - comb(2, 2) / comb(5, 2)) + (1 - comb(4, 2) / comb(5, 2))) / 2
    assert pass_at_k(recs, 2) == pytest.approx(expected)


def test_instances_are_told_apart_by_env_horizon_and_seed():
    recs = records({1: [True, True]}, env="ledger") + records({1: [False, False]}, env="dict_sum") \
        + records({1: [False, False]}, horizon=9)
    assert pass_at_k(recs, 2) == pytest.approx(1 / 3)


def test_k_above_the_trial_count_names_n():
    ragged = records({1: [True] * 4, 2: [True, False]})
    with pytest.raises(ValueError, match="n=2"):
        pass_at_k(ragged, 3)
    with pytest.raises(ValueError, match="n=4"):
        pass_hat_k(HAND, 5)
    with pytest.raises(ValueError, match="k must be >= 1"):
        pass_at_k(HAND, 0)
    with pytest.raises(ValueError, match="no episode records"):
        pass_hat_k([], 1)


def test_a_trial_recorded_twice_is_refused_not_counted_as_another_trial():
    # Records concatenated twice: one instance, 1 of 2 trials succeeds, pass^2 = C(1,2)/C(2,2) = 0; counted
    # twice it read C(2,2)/C(4,2) = 1/6, and k = 3 passed the trial-count check.
    once = records({5: [True, False]})
    assert pass_hat_k(once, 2) == 0.0
    for analysis in (pass_at_k, pass_hat_k):
        with pytest.raises(ValueError, match="two records of trial 0 of instance ledger horizon=5 seed=5"):
            analysis(once + once, 2)
    with pytest.raises(ValueError, match="seeds repeat \\[3\\]"):
        run_trials(lambda: None, "ledger", 2, [3, 3], 2)


def test_run_trials_end_to_end_with_seeded_sampling():
    tok = tiny_tokenizer()
    model = tiny_model("llama")

    def factory(seed=5):
        return HFPolicy(model, tok, tool_prompt_for(tok), max_new_tokens=6, temperature=1.0, seed=seed)

    seeds = [1_000_000, 1_000_001]
    # 4 (instance, trial) pairs in batches of 3: the first batch mixes instances and trials.
    episodes, steps = run_trials(factory, "dict_sum", 1, seeds, 2, batch_size=3, with_steps=True)
    assert [(e.episode, e.seed, e.trial) for e in episodes] == [
        (0, seeds[0], 0), (1, seeds[0], 1), (2, seeds[1], 0), (3, seeds[1], 1)]
    raw = {e: [s.raw for s in steps if s.episode == e] for e in range(4)}
    assert raw[0] != raw[1] and raw[2] != raw[3], "each trial samples with its own seed"
    # Trial t equals a lone run of a policy seeded base + t (base: the factory policy's seed, 5).
    _, alone = run_episodes(factory(5 + 1), [make_environment("dict_sum", 1, seeds[0])])
    assert [s.raw for s in alone] == raw[1]
    assert 0.0 <= pass_hat_k(episodes, 2) <= pass_at_k(episodes, 2) <= 1.0


def test_a_policy_without_per_row_seeds_is_refused():
    class Fixed:
        seed = 0

        def start(self, conversations, episode_seeds):
            pass

    with pytest.raises(TypeError, match="policy_seeds"):
        run_trials(Fixed, "dict_sum", 1, [1_000_000], 2)


def test_seeds_that_play_one_instance_of_a_finite_environment_are_refused(tmp_path):
    env_file = tmp_path / "finite.py"
    env_file.write_text(
        "from qdrift.envs.registry import load_environment\n"
        "class Finite(load_environment('pointer_chase')):\n"
        "    @classmethod\n"
        "    def instance_key(cls, seed, **knobs):\n"
        "        return seed % 3\n")
    ref = f"{env_file}@Finite"
    with pytest.raises(ValueError, match=r"seeds 1000000 and 1000003 give the same .* instance \(1\)"):
        run_trials(lambda: None, ref, 1, [1_000_000, 1_000_001, 1_000_003], 1)
