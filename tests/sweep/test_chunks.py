"""A long agent cell keeps its finished chunks: a run killed inside it resumes after the last one, with the rows
an uninterrupted run records."""

import pytest

import qdrift.envs.runner as runner_module
import qdrift.envs.trials as trials_module
from qdrift.store import Store
from qdrift.sweep import LocalExecutor, parse_sweep, run_sweep, unique_cells
from qdrift.sweep.runners import CellRunner

GREEDY = """\
name: t
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: ledger
    horizons: [2]
    seeds: 5
    max_new_tokens: 6
batch: 2
"""
DRIFT = GREEDY.replace("    max_new_tokens: 6\n", "    max_new_tokens: 6\n    drift: true\n")
SAMPLED = GREEDY.replace("    max_new_tokens: 6\n", "    max_new_tokens: 6\n    sampling: {temperature: 0.8, top_p: 0.9, samples: 2, seed: 3}\n")
VOLATILE = {"id", "cell", "created", "started", "finished", "wall_s", "seconds", "elapsed_s"}


def stable(rows):
    return sorted(([(k, v) for k, v in sorted(r.items()) if k not in VOLATILE] for r in rows), key=repr)


def run(text, store):
    return run_sweep(parse_sweep(text), store, executor=LocalExecutor(CellRunner(batch=2)), progress=False)


@pytest.fixture
def calls(monkeypatch):
    """Counts `run_episodes` calls; `calls.kill_at = n` raises KeyboardInterrupt (a kill) at the n-th."""
    real = runner_module.run_episodes

    class Calls:
        n = 0
        kill_at = None

    def counting(*args, **kwargs):
        Calls.n += 1
        if Calls.n == Calls.kill_at:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(runner_module, "run_episodes", counting)  # greedy cells import it when they run
    monkeypatch.setattr(trials_module, "run_episodes", counting)  # sampled cells, through run_trials
    return Calls


# chunks per cell (batch 2: 5 seeds greedy, 5 x 2 samples one seed at a time); with drift a variant cell also
# records the baseline's episodes of the chunks the rerun took from the store, so only the rows are compared
@pytest.mark.parametrize("text, chunks", [(GREEDY, 3), (SAMPLED, 5), (DRIFT, None)])
def test_a_killed_cell_resumes_after_its_last_finished_chunk_with_the_rows_of_an_uninterrupted_run(
        tmp_path, calls, text, chunks):
    with Store(tmp_path / "clean.sqlite") as clean:
        assert run(text, clean).done == 2 and clean.chunk_count() == 0  # kept chunks go with the recorded cell
        want = {kind: stable(clean.rows(kind)) for kind in ("episode", "step", "drift")}
    first_cell = unique_cells(parse_sweep(text))[0]
    calls.n, calls.kill_at = 0, 3  # killed in the baseline cell's third chunk
    with Store(tmp_path / "killed.sqlite") as store:
        with pytest.raises(KeyboardInterrupt):
            run(text, store)
        assert store.status(first_cell.key) is None and store.chunk_count(first_cell.key) == 2
        calls.n, calls.kill_at = 0, None
        assert run(text, store).done == 2
        if chunks is not None:  # the baseline cell ran only its chunks after the two kept, the variant all its own
            assert calls.n == (chunks - 2) + chunks
        assert store.chunk_count() == 0
        assert {kind: stable(store.rows(kind)) for kind in ("episode", "step", "drift")} == want


def test_chunks_kept_by_other_code_are_not_mixed_into_a_cell(tmp_path, calls):
    from qdrift.code_fingerprint import running_code

    cell = unique_cells(parse_sweep(GREEDY))[0]
    fake = {"episode": [{"seed": -1}], "step": []}
    for code, taken in (("other code", False), (running_code(), True)):  # the second shows the name is the chunk's
        with Store(tmp_path / f"{taken}.sqlite") as store:
            store.save_chunk(cell.key, "1000000,1000001", fake, code)
            assert run(GREEDY, store).done == 2 and store.chunk_count() == 0
            assert (-1 in {r["seed"] for r in store.rows("episode")}) is taken
