"""Sampled agent tasks: k trials per seed at a stated temperature / top-p, keyed apart from greedy cells."""

import pytest

from qdrift.store import Store
from qdrift.sweep import LocalExecutor, SweepError, parse_sweep, run_sweep, unique_cells
from qdrift.sweep.runners import CellRunner

TEXT = """\
name: t
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: ledger
    horizons: [2]
    seeds: 2
    max_new_tokens: 4
"""
SAMPLED = TEXT + "    sampling: {temperature: 0.8, top_p: 0.9, samples: 3, seed: 5}\n"


def test_sampling_enters_the_keys_only_when_set_and_defaults_key_as_left_out():
    greedy = unique_cells(parse_sweep(TEXT))
    sampled = unique_cells(parse_sweep(SAMPLED))
    assert all(g.key != s.key for g, s in zip(greedy, sampled, strict=True))
    assert "sampling" not in greedy[0].config()
    assert sampled[0].config()["sampling"] == {"temperature": 0.8, "top_p": 0.9, "samples": 3, "seed": 5}
    defaults = TEXT + "    sampling: {temperature: 0.8, top_p: 1.0, samples: 4, seed: 0}\n"
    assert [c.key for c in unique_cells(parse_sweep(defaults))] == \
        [c.key for c in unique_cells(parse_sweep(TEXT + "    sampling: {temperature: 0.8}\n"))]


def test_a_sampled_cell_runs_k_trials_per_seed_each_as_it_would_alone(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        assert run_sweep(parse_sweep(SAMPLED), store, executor=LocalExecutor(CellRunner(batch=4)),
                         progress=False).done == 2
        eps = [r for r in store.rows("episode") if r["config"] == "baseline"]
        steps = [r for r in store.rows("step") if r["config"] == "baseline"]
    assert sorted((r["seed"], r["trial"]) for r in eps) == [(s, t) for s in (1_000_000, 1_000_001) for t in range(3)]
    # another batch gives each (seed, trial) the same trajectory: a trial does not depend on its batch mates
    cell = unique_cells(parse_sweep(SAMPLED))[0]
    alone = CellRunner(batch=1)(cell)
    assert sorted((r["seed"], r["trial"], r["steps"]) for r in alone["episode"]) == \
        sorted((r["seed"], r["trial"], r["steps"]) for r in eps)
    by_episode = {}
    for s in alone["step"]:
        by_episode.setdefault(s["episode"], []).append(s["raw"])
    stored = {}
    for s in steps:
        stored.setdefault(s["episode"], []).append(s["raw"])
    key = {r["episode"]: (r["seed"], r["trial"]) for r in alone["episode"]}
    skey = {r["episode"]: (r["seed"], r["trial"]) for r in eps}
    assert {key[e]: v for e, v in by_episode.items()} == {skey[e]: v for e, v in stored.items()}
    texts = {tuple(v) for v in stored.values()}
    assert len(texts) > 1  # sampling at T = 0.8 does not repeat one trajectory


@pytest.mark.parametrize("block, message", [
    ("{top_p: 0.9}", "sampling: must be a mapping with a temperature > 0"),
    ("{temperature: 0}", "sampling.temperature: must be in (0, 10], got 0"),
    ("{temperature: 0.7, top_p: 1.5}", "sampling.top_p: must be in (0, 1], got 1.5"),
    ("{temperature: 0.7, samples: 0}", "samples: must be an integer in 1.."),
    ("{temperature: 0.7, samples: 1000}", "sampling.samples: at most 64, got 1000"),
    ("{temperature: 0.7, k: 4}", "unknown key 'k'"),
])
def test_bad_sampling_blocks_are_refused_with_the_field_named(block, message):
    with pytest.raises(SweepError) as e:
        parse_sweep(TEXT + f"    sampling: {block}\n", source="s.yaml")
    assert any(message in p for p in e.value.problems), e.value.problems


def test_drift_and_sampling_are_refused_together():
    with pytest.raises(SweepError) as e:
        parse_sweep(SAMPLED + "    drift: true\n", source="s.yaml")
    assert any("drift: replays the baseline's greedy episodes" in p for p in e.value.problems)
