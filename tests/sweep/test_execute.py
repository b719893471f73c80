"""Running a sweep: done cells are skipped, a failing cell is recorded and the sweep goes on, a rerun retries it."""

import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from qdrift import run_locks
from qdrift.code_fingerprint import running_code
from qdrift.store import Store
from qdrift.sweep import Cell, LocalExecutor, parse_sweep, run_sweep, shortform, unique_cells
from qdrift.sweep.runners import CellRunner

TEXT = """\
name: t
models: [tiny:llama]
specs: [baseline, w8-a16-kv:16]
tasks:
  - env: ledger
    horizons: [1, 2]
    seeds: 2
"""


class CountingRunner:
    """Stands in for the model: fake episode rows, and a failure for the cells named in `fail`."""

    def __init__(self, fail=()):
        self.calls: list[str] = []
        self.fail = set(fail)

    def __call__(self, cell: Cell):
        self.calls.append(cell.label)
        if cell.label in self.fail:
            raise RuntimeError(f"boom in {cell.label}")
        eps = [{"episode": i, "env": "ledger", "horizon": cell.horizon, "seed": s, "trial": 0, "success": True,
                "steps": cell.horizon, "first_error_step": None} for i, s in enumerate(cell.task.seeds)]
        return {"episode": eps, "step": []}


def run(store, runner):
    return run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(runner), progress=False)


def test_a_rerun_skips_every_done_cell(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        first, second = CountingRunner(), CountingRunner()
        assert run(store, first).done == 4 and len(first.calls) == 4
        outcome = run(store, second)
        assert second.calls == [] and outcome.skipped == 4 and outcome.done == 0
        assert len(store.rows("episode")) == 8


def test_a_failing_cell_is_recorded_the_sweep_goes_on_and_a_rerun_retries_only_it(tmp_path):
    bad = "tiny:llama w8-a16-kv:16 ledger L=1"
    with Store(tmp_path / "r.sqlite") as store:
        runner = CountingRunner(fail={bad})
        outcome = run(store, runner)
        assert len(runner.calls) == 4 and outcome.done == 3
        assert outcome.failed == [(bad, f"RuntimeError: boom in {bad}")]
        (failed,) = store.cells("failed")
        assert failed["config"]["horizon"] == 1 and "Traceback" in failed["error"]
        retry = CountingRunner()
        assert run(store, retry).done == 1 and retry.calls == [bad]
        assert [c["status"] for c in store.cells()] == ["done"] * 4
        assert {c["attempts"] for c in store.cells()} == {1, 2}


def test_a_store_refuses_to_resume_a_model_whose_weights_changed(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"first weights")
    sweep = parse_sweep(TEXT.replace("models: [tiny:llama]", f"models: [{folder}]"))
    with Store(tmp_path / "r.sqlite") as store:
        assert run_sweep(sweep, store, executor=LocalExecutor(CountingRunner()), progress=False).done == 4
        (folder / "model.safetensors").write_bytes(b"retrained weights")
        runner = CountingRunner()
        with pytest.raises(ValueError, match=rf"model '{folder}' with weights sha256 .*now loads weights .*new store"):
            run_sweep(sweep, store, executor=LocalExecutor(runner), progress=False)
        assert runner.calls == [] and len(store.cells("done")) == 4  # nothing ran, nothing lost
        (folder / "model.safetensors").write_bytes(b"first weights")
        assert run_sweep(sweep, store, executor=LocalExecutor(runner), progress=False).skipped == 4
        assert set(store.model_fingerprints()) == {str(folder)}


def test_cells_expand_model_by_spec_by_horizon_with_distinct_keys_that_follow_the_config():
    cells = unique_cells(parse_sweep(TEXT))
    assert [c.label for c in cells] == ["tiny:llama baseline ledger L=1", "tiny:llama baseline ledger L=2",
                                        "tiny:llama w8-a16-kv:16 ledger L=1", "tiny:llama w8-a16-kv:16 ledger L=2"]
    assert len({c.key for c in cells}) == 4
    cell = cells[2]
    assert cell.config()["spec_hash"] and cell.key == unique_cells(parse_sweep(TEXT))[2].key
    assert replace(cell, version="9.9").key != cell.key
    more_seeds = unique_cells(parse_sweep(TEXT.replace("seeds: 2", "seeds: 3")))[2]
    assert more_seeds.key != cell.key
    knobs = unique_cells(parse_sweep(TEXT.replace("seeds: 2", "seeds: 2\n    knobs: {slack: 1}")))[2]
    assert knobs.key != cell.key
    batch = unique_cells(parse_sweep(TEXT + "batch: 7\n"))[2]
    assert batch.key == cell.key  # how episodes are batched does not change what a cell measures


def test_short_form_cells_go_to_the_registered_runner_and_need_item_and_correct(tmp_path):
    seen = []

    def runner(model, tokenizer, task):
        seen.append((task.task, task.limit, dict(task.options)))
        return [{"item": i, "correct": i % 2 == 0} for i in range(4)]

    shortform.register("fake", runner)
    try:
        text = TEXT.replace("  - env: ledger\n    horizons: [1, 2]\n    seeds: 2\n",
                            "  - kind: short_form\n    runner: fake\n    task: arith\n    limit: 4\n"
                            "    options: {shots: 0}\n")
        with Store(tmp_path / "r.sqlite") as store:
            outcome = run_sweep(parse_sweep(text), store, progress=False)
            assert outcome.done == 2 and seen == [("arith", 4, {"shots": 0})] * 2
            items = store.rows("item")
            assert len(items) == 8 and {r["config"] for r in items} == {"baseline", "w8-a16-kv:16"}
        with pytest.raises(ValueError, match=r"lacks field\(s\) \['correct'\]"):
            shortform.check_items("fake", [{"item": 1}])
    finally:
        shortform.unregister("fake")


def test_unknown_short_form_runner_error_lists_the_available_ones():
    with pytest.raises(shortform.RunnerUnavailable, match="Unknown short-form runner 'lmevl'. Did you mean 'lmeval'"):
        shortform.lookup("lmevl")


def test_agent_cells_run_real_episodes_on_a_quantized_tiny_model():
    sweep = parse_sweep(TEXT.replace("seeds: 2", "seeds: 2\n    max_new_tokens: 4").replace("[1, 2]", "[1]"))
    runner = CellRunner(batch=2)
    base, variant = unique_cells(sweep)
    rows = runner(variant)
    assert [r["seed"] for r in rows["episode"]] == [1_000_000, 1_000_001]
    assert len(rows["step"]) == sum(r["steps"] for r in rows["episode"])
    model, _ = runner.models.get("tiny:llama", "w8-a16-kv:16")
    base_model, _ = runner.models.get("tiny:llama", "baseline")
    assert model is not base_model and runner.models.get("tiny:llama", "w8-a16-kv:16")[0] is model
    assert type(base_model.model.layers[0].mlp.down_proj).__name__ == "Linear"  # the base stays unquantized


def test_drift_enters_the_keys_of_variant_cells_only():
    plain = unique_cells(parse_sweep(TEXT))
    drift = unique_cells(parse_sweep(TEXT.replace("seeds: 2", "seeds: 2\n    drift: true")))
    assert [c.key for c in drift[:2]] == [c.key for c in plain[:2]]  # baseline cells: nothing to drift from
    assert all(d.key != p.key and d.config()["drift"] is True for d, p in zip(drift[2:], plain[2:], strict=True))
    assert "drift" not in plain[2].config()  # so stores written before the option keep their keys


@pytest.mark.parametrize("spec", ["w16-a16-kv:16", "w4g32-a16-kv:16"])
def test_drift_cells_replay_the_baseline_cells_own_episodes(tmp_path, spec):
    text = (TEXT.replace("seeds: 2", "seeds: 3\n    max_new_tokens: 4\n    drift: true")
            .replace("[1, 2]", "[2]").replace("w8-a16-kv:16", spec))
    with Store(tmp_path / "r.sqlite") as store:
        assert run_sweep(parse_sweep(text), store, executor=LocalExecutor(CellRunner(batch=2)), progress=False).done == 2
        steps, drift = store.rows("step"), store.rows("drift")
    base_tokens = sum(s["tokens_out"] for s in steps if s["config"] == "baseline")
    # one drift row per token the baseline cell generated (batch 2 over 3 seeds: two replays)
    assert len(drift) == base_tokens and {r["config"] for r in drift} == {spec}
    assert {r["seed"] for r in drift} == {1_000_000, 1_000_001, 1_000_002} and {r["horizon"] for r in drift} == {2}
    if spec == "w16-a16-kv:16":  # leaves every tensor as it is
        assert all(r["kl"] == 0 and r["top1_agree"] for r in drift)
    else:
        assert max(r["kl"] for r in drift) > 0


def test_a_variant_cell_on_its_own_records_the_baselines_tokens_exactly_as_the_baseline_cell_did():
    # In one runner the variant reuses the tokens the baseline cell recorded; a fresh runner (another
    # worker) records them itself. The drift rows must be the same either way.
    sweep = parse_sweep(TEXT.replace("seeds: 2", "seeds: 3\n    max_new_tokens: 4\n    drift: true")
                        .replace("[1, 2]", "[2]").replace("w8-a16-kv:16", "w4g32-a16-kv:16"))
    base, variant = unique_cells(sweep)
    shared = CellRunner(batch=2)
    shared(base)
    assert len(shared.baseline_traces) == 2  # 3 seeds in batches of 2
    reused = shared(variant)["drift"]
    alone = CellRunner(batch=2)(variant)["drift"]
    assert reused and reused == alone


def test_a_failing_result_sink_is_reported_and_stopped_and_never_stops_the_sweep(tmp_path):
    calls = []

    def sink(result):
        calls.append(result.cell.label)
        raise ConnectionError("wandb.init timed out")

    with Store(tmp_path / "r.sqlite") as store:
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                            on_result=sink)
        assert outcome.done == 4 and len(store.cells("done")) == 4 and len(calls) == 1
        assert outcome.sink_error == "ConnectionError: wandb.init timed out"
        assert "the result sink failed and was stopped" in outcome.summary()


def test_editing_a_custom_environment_gives_its_cells_new_keys(tmp_path):
    from pathlib import Path

    env = tmp_path / "myledger.py"
    env.write_text(Path("agents/ledger.py").read_text())
    text = f"models: [tiny:llama]\nspecs: [baseline]\ntasks:\n  - env: {env}@Ledger\n    horizons: [1]\n    seeds: 1\n"
    (before,) = unique_cells(parse_sweep(text))
    key = before.key
    assert len(before.config()["env_sha256"]) == 64
    env.write_text(env.read_text() + "\n# changed\n")
    assert before.key == key  # read when the cell was made: an edit during a sweep cannot move a running cell
    (after,) = unique_cells(parse_sweep(text))
    assert after.key != key
    (builtin,) = unique_cells(parse_sweep(TEXT.replace("horizons: [1, 2]", "horizons: [1]").replace(
        "specs: [baseline, w8-a16-kv:16]", "specs: [baseline]")))
    assert "env_sha256" not in builtin.config()  # built-in environments keep their keys


def test_a_cell_whose_environment_file_changed_since_the_sweep_started_fails_naming_it(tmp_path):
    # The registry reloads an edited file, so a later cell would run the new code under the old file's key.
    from pathlib import Path

    env = tmp_path / "myledger.py"
    env.write_text(Path("agents/ledger.py").read_text())
    text = f"models: [tiny:llama]\nspecs: [baseline]\ntasks:\n  - env: {env}@Ledger\n    horizons: [1]\n    seeds: 1\n"
    (cell,) = unique_cells(parse_sweep(text))
    runner = CellRunner(batch=1)
    assert runner(replace(cell, task=replace(cell.task, max_new_tokens=2)))["episode"]
    env.write_text(env.read_text() + "\n# edited mid-sweep\n")
    with pytest.raises(RuntimeError, match="environment file .* changed since this sweep started"):
        runner(cell)


def test_a_stochastic_rounding_spec_on_activations_or_the_cache_keys_its_cells_by_batch():
    # Its random stream runs over each forward's whole batch, so the batch size changes its results.
    text = TEXT.replace("specs: [baseline, w8-a16-kv:16]", "specs: [baseline, w16-a4~sr1-kv:16, w4~sr1-a16-kv:16, "
                        "w16-a16-kv:4~sr2@dyn]").replace("seeds: 2", "seeds: 9")  # more seeds than either batch
    keyed = {c.spec: c.config().get("batch") for c in unique_cells(parse_sweep(text + "batch: 7\n"))}
    assert keyed == {"baseline": None, "w16-a4~sr1-kv:16": 7, "w4~sr1-a16-kv:16": None, "w16-a16-kv:4~sr2@dyn": 7}
    one, seven = (unique_cells(parse_sweep(text + f"batch: {b}\n")) for b in (1, 7))
    assert [a.key == b.key for a, b in zip(one, seven, strict=True)] == [True, True, False, False, True, True,
                                                                         False, False]


def test_a_stochastic_rounding_cell_gives_the_same_rows_after_other_cells_of_its_spec_as_alone():
    # A variant is kept across the cells of its spec, so a cell must not continue the random stream the
    # ones before it drew: a resumed or a parallel sweep runs it after other cells, or first.
    text = TEXT.replace("specs: [baseline, w8-a16-kv:16]", "specs: [w16-a4~sr1-kv:4~sr2@dyn]") + \
        "    max_new_tokens: 6\n"
    first, second = unique_cells(parse_sweep(text))  # L = 1, then L = 2
    runner = CellRunner(batch=2)
    runner(first)
    after = runner(second)
    alone = CellRunner(batch=2)(second)
    assert [r["raw"] for r in after["step"]] == [r["raw"] for r in alone["step"]]
    assert [r["logprob"] for r in after["step"]] == [r["logprob"] for r in alone["step"]]


def test_weights_whose_every_cell_failed_do_not_pin_the_stores_fingerprint(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"broken weights")
    sweep = parse_sweep(TEXT.replace("models: [tiny:llama]", f"models: [{folder}]"))
    labels = [c.label for c in unique_cells(sweep)]
    with Store(tmp_path / "r.sqlite") as store:
        assert len(run_sweep(sweep, store, executor=LocalExecutor(CountingRunner(fail=labels)), progress=False).failed) == 4
        (folder / "model.safetensors").write_bytes(b"fixed weights")
        assert run_sweep(sweep, store, executor=LocalExecutor(CountingRunner()), progress=False).done == 4
        (folder / "model.safetensors").write_bytes(b"retrained weights")  # now results exist: refused
        with pytest.raises(ValueError, match="resuming would mix the two"):
            run_sweep(sweep, store, executor=LocalExecutor(CountingRunner()), progress=False)


def test_a_cell_an_earlier_run_started_and_never_recorded_runs_after_the_others(tmp_path):
    # The local executor runs cells in its own process: a cell that crashes it (a segfault, an OOM kill)
    # is never recorded. Run first on every rerun, it kept the cells after it from ever running.
    cells = unique_cells(parse_sweep(TEXT))
    crashing = cells[0]
    with Store(tmp_path / "r.sqlite") as store:
        with store.running():  # a run that claims a cell and ends without recording it, as a killed one does
            assert store.claim(crashing.key) == "ours"
        assert store.interrupted() == {crashing.key}
        runner = CountingRunner()
        outcome = run(store, runner)
        assert runner.calls[-1] == crashing.label and len(runner.calls) == 4
        assert outcome.interrupted == 1 and "they ran after the others" in outcome.summary()
        assert store.interrupted() == set()  # recorded: the note is cleared
        assert run(store, CountingRunner()).interrupted == 0


class SlowRunner(CountingRunner):
    """A CountingRunner that takes `seconds` per cell, so that runs sharing a store overlap."""

    def __init__(self, seconds, fail=()):
        super().__init__(fail)
        self.seconds = seconds

    def __call__(self, cell):
        time.sleep(self.seconds)
        return super().__call__(cell)


class ThreadRun(threading.Thread):
    """A sweep run in a thread, with a store connection of its own as another process would have."""

    def __init__(self, path, executor, sweep=None):
        super().__init__()
        self.path, self.executor, self.sweep, self.outcome = path, executor, sweep or parse_sweep(TEXT), None

    def run(self):
        with Store(self.path) as store:
            self.outcome = run_sweep(self.sweep, store, executor=self.executor, progress=False, poll_s=0.05)


def wait_until(condition, seconds=10.0):
    """Poll `condition` until it holds (a thread's progress, not a fixed sleep, under any load)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_two_runs_sharing_a_store_split_its_cells_and_each_waits_for_the_other(tmp_path):
    # Before claims, each run ran every pending cell: the work was doubled.
    sweep = parse_sweep(TEXT.replace("horizons: [1, 2]", "horizons: [1, 2, 3, 4]"))
    runners = [SlowRunner(0.2), SlowRunner(0.2)]
    threads = [ThreadRun(tmp_path / "r.sqlite", LocalExecutor(r), sweep) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outcomes = [t.outcome for t in threads]
    calls = runners[0].calls + runners[1].calls
    assert sorted(calls) == sorted(c.label for c in unique_cells(sweep))  # each cell once
    assert runners[0].calls and runners[1].calls
    for outcome, runner in zip(outcomes, runners, strict=True):
        assert outcome.done == len(runner.calls) and not outcome.failed
        assert outcome.skipped + outcome.done + outcome.elsewhere == 8
    with Store(tmp_path / "r.sqlite") as store:
        assert len(store.cells("done")) == 8 and store.interrupted() == set()


@contextmanager
def beside_a_run_holding(path, held):
    """Another live run on the store at `path` holding the `held` cells (the store it runs through), and
    a run of the whole grid started beside it: yields (that store, the new run's runner, its ThreadRun)."""
    with Store(path) as other, other.running():
        assert all(other.claim(cell.key) == "ours" for cell in held)
        runner = CountingRunner()
        waiting = ThreadRun(path, LocalExecutor(runner))
        waiting.start()
        yield other, runner, waiting


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_a_run_waits_for_a_cell_another_run_holds_and_takes_it_over_when_that_run_dies(tmp_path):
    cells = unique_cells(parse_sweep(TEXT))
    with beside_a_run_holding(tmp_path / "r.sqlite", cells[:2]) as (other, runner, waiting):
        wait_until(lambda: len(runner.calls) == 2)
        assert sorted(runner.calls) == sorted(c.label for c in cells[2:])  # the held two wait
        other.record_done(cells[0].key, cells[0].config(), {"episode": []}, 0.0, 1.0,
                          code=running_code())  # as a run of the same code records it
        time.sleep(0.3)  # six polls
        assert waiting.is_alive() and len(runner.calls) == 2  # the second is still held
    # the holding run ends without recording its second cell (as a killed run would)
    waiting.join(timeout=10)
    assert not waiting.is_alive()
    assert runner.calls[-1] == cells[1].label and len(runner.calls) == 3
    assert waiting.outcome.done == 3 and waiting.outcome.elsewhere == 1
    assert "1 finished by another run sharing the store" in waiting.outcome.summary()


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_a_cell_another_run_failed_meanwhile_is_reported_not_run_again(tmp_path):
    cells = unique_cells(parse_sweep(TEXT))
    with beside_a_run_holding(tmp_path / "r.sqlite", cells[:1]) as (other, runner, waiting):
        wait_until(lambda: len(runner.calls) == 3)  # the others done: it waits for the held one
        other.record_failed(cells[0].key, cells[0].config(), "RuntimeError: out of memory\n\nTraceback", time.time(),
                            time.time())
        waiting.join(timeout=10)
    assert cells[0].label not in runner.calls and waiting.outcome.done == 3
    assert waiting.outcome.failed == [(cells[0].label,
                                       "(in another run sharing the store) RuntimeError: out of memory")]


class FlakySink:
    """A result sink named as WandbSink names itself; raises on its `fail_on`-th call."""

    def __init__(self, name="wandb:me/p", fail_on=None):
        self.name, self.fail_on, self.results = name, fail_on, []

    def __call__(self, result):
        if len(self.results) + 1 == self.fail_on:
            raise ConnectionError("W&B is unreachable")
        self.results.append(result)


def test_cells_a_failed_sink_missed_are_logged_from_the_store_by_the_next_run_with_that_sink(tmp_path):
    # Before, they reached W&B again only through `qdrift sweep cell`, one at a time.
    with Store(tmp_path / "r.sqlite") as store:
        runner, first = CountingRunner(), FlakySink(fail_on=2)
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(runner), progress=False, on_result=first)
        assert outcome.done == 4 and len(first.results) == 1 and outcome.unlogged == 3
        assert "3 cell(s) not logged: the next run with the same sink logs them" in outcome.summary()
        missed = store.pending_logs("wandb:me/p")
        assert len(missed) == 3 and first.results[0].cell.key not in missed

        other = FlakySink(name="wandb:me/other")  # another project: not its cells
        assert run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(runner), progress=False,
                         on_result=other).caught_up == 0 and other.results == []
        again = FlakySink()
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(runner), progress=False, on_result=again)
        assert (outcome.skipped, outcome.done, outcome.caught_up, outcome.unlogged) == (4, 0, 3, 0)
        assert "3 done cell(s) an earlier run's result sink had missed were logged now" in outcome.summary()
        assert {r.cell.key for r in again.results} == missed and len(runner.calls) == 4  # nothing ran again
        for result in again.results:  # the rows as the run returned them, no config columns added
            assert result.error is None and result.rows == runner_rows(result.cell)
        assert store.pending_logs("wandb:me/p") == set()
        assert run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(runner), progress=False,
                         on_result=FlakySink()).caught_up == 0


def test_a_sink_that_fails_again_while_catching_up_keeps_the_rest_noted(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                  on_result=FlakySink(fail_on=1))
        assert len(store.pending_logs("wandb:me/p")) == 4
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                            on_result=FlakySink(fail_on=3))
        assert (outcome.caught_up, outcome.unlogged) == (2, 2) and outcome.sink_error.startswith("ConnectionError")
        assert len(store.pending_logs("wandb:me/p")) == 2


def runner_rows(cell):
    """The rows the runner returns for `cell`, less the kinds it has none of (nothing to store)."""
    return {kind: rows for kind, rows in CountingRunner()(cell).items() if rows}


class InterruptingSink(FlakySink):
    def __call__(self, result):
        raise KeyboardInterrupt  # Ctrl-C (or a kill) while the cell is being logged


def test_a_run_stopped_while_logging_a_cell_leaves_it_for_the_next_run_with_that_sink(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        with pytest.raises(KeyboardInterrupt):
            run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                      on_result=InterruptingSink())
        (stopped,) = store.cells("done")
        assert store.pending_logs("wandb:me/p") == {stopped["key"]}
        sink = FlakySink()
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                            on_result=sink)
        assert outcome.caught_up == 1 and outcome.done == 3 and len(sink.results) == 4
        assert store.pending_logs("wandb:me/p") == set()


def test_a_sink_without_a_name_says_the_cells_it_missed_are_not_kept(tmp_path):
    def failing(result):
        raise ConnectionError("down")

    with Store(tmp_path / "r.sqlite") as store:
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                            on_result=failing)
    assert outcome.unlogged == 4 and "4 cell(s) not logged: this sink keeps no record of them" in outcome.summary()


class CountingExecutor(LocalExecutor):
    """A LocalExecutor that counts how often it is started (a Ray executor starts a cluster each time)."""

    def __init__(self, runner):
        super().__init__(runner)
        self.submits = 0

    def submit(self, cells, on_start=None):
        self.submits += 1
        return super().submit(cells, on_start)


@pytest.mark.skipif(not run_locks.supported(), reason="no flock on this platform")
def test_an_executor_is_started_only_for_cells_to_run_not_to_wait_for_held_ones(tmp_path):
    cells = unique_cells(parse_sweep(TEXT))
    path = tmp_path / "r.sqlite"
    with Store(path) as other, other.running():
        for cell in cells:
            assert other.claim(cell.key) == "ours"
        executor = CountingExecutor(CountingRunner())
        waiting = ThreadRun(path, executor)
        waiting.start()
        wait_until(lambda: len(list(Path(f"{path.resolve()}-runs").iterdir())) == 2)  # its run lock is taken
        for cell in cells:
            time.sleep(0.2)
            other.record_done(cell.key, cell.config(), {"episode": []}, 0.0, 1.0)
        waiting.join(timeout=10)
    assert waiting.outcome.elsewhere == 4 and executor.submits == 0 and executor.runner.calls == []


def test_a_cell_an_older_qdrift_started_and_never_recorded_counts_as_interrupted(tmp_path):
    cells = unique_cells(parse_sweep(TEXT))
    with Store(tmp_path / "r.sqlite") as store:
        store._db.execute("INSERT INTO started VALUES (?, ?)", (cells[0].key, 1.0))  # no hold: written before holds
        assert store.interrupted() == {cells[0].key}
        runner = CountingRunner()
        assert run(store, runner).interrupted == 1 and runner.calls[-1] == cells[0].label


def test_a_sink_named_empty_keeps_no_pending_logs_and_says_so(tmp_path):
    with Store(tmp_path / "r.sqlite") as store:
        outcome = run_sweep(parse_sweep(TEXT), store, executor=LocalExecutor(CountingRunner()), progress=False,
                            on_result=FlakySink(name="", fail_on=1))
        assert store.pending_logs("") == set()
    assert "4 cell(s) not logged: this sink keeps no record of them" in outcome.summary()


class OtherCheckoutExecutor(LocalExecutor):
    """Cells run as by a worker on another checkout: each result carries that worker's code."""

    def __init__(self, runner, code):
        super().__init__(runner)
        self.code = code

    def submit(self, cells, on_start=None):
        for result in super().submit(cells, on_start):
            yield replace(result, code=self.code)


def test_a_cell_measured_by_other_code_than_the_stores_results_is_failed_not_recorded_unless_allowed(tmp_path):
    sweep = parse_sweep(TEXT)
    with Store(tmp_path / "s.sqlite") as store:
        run_sweep(replace(sweep, specs=["baseline"]), store, LocalExecutor(CountingRunner()), progress=False)
        # The run's own check passes (its code measured the store); its worker's cells are another code's.
        outcome = run_sweep(sweep, store, OtherCheckoutExecutor(CountingRunner(), "f" * 64), progress=False)
        assert outcome.done == 0 and len(outcome.failed) == 2
        assert all("measured by qdrift code sha256 ffffffffffffffff" in error for _, error in outcome.failed)
        assert len(store.code_fingerprints()) == 1 and store.code_fingerprints()[0] != "f" * 64
        outcome = run_sweep(sweep, store, OtherCheckoutExecutor(CountingRunner(), "f" * 64), progress=False,
                            allow_code_change=True)
        assert outcome.done == 2 and store.code_fingerprints()[1:] == ["f" * 64]


def test_a_cell_after_which_qdrifts_files_differ_fails_and_later_cells_are_not_run(tmp_path, monkeypatch):
    from qdrift import code_fingerprint as cf

    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "task.yaml").write_text("task: a\n")
    monkeypatch.setenv("QDRIFT_EVALS", str(evals))  # a task folder this test may edit
    cf.running_code.cache_clear()

    class EditingRunner(CountingRunner):
        def __call__(self, cell):
            (evals / "task.yaml").write_text("task: b\n")  # an edit (a pull) while the sweep runs
            return super().__call__(cell)

    try:
        runner = EditingRunner()
        with Store(tmp_path / "s.sqlite") as store:
            outcome = run_sweep(replace(parse_sweep(TEXT), specs=["baseline"]), store, LocalExecutor(runner),
                                progress=False)
            assert outcome.done == 0 and len(outcome.failed) == 2 and len(runner.calls) == 1
            assert all("CodeChanged: qdrift's files" in error for _, error in outcome.failed)
            assert store.code_fingerprints() == []
    finally:
        monkeypatch.undo()
        cf.running_code.cache_clear()


def test_a_cell_whose_model_another_run_re_pinned_to_other_weights_meanwhile_is_failed_not_recorded(tmp_path):
    import sqlite3

    path = tmp_path / "s.sqlite"

    class RepinningRunner(CountingRunner):
        def __call__(self, cell):  # run B, other weights under the same name, starts before this cell records
            with sqlite3.connect(path) as db:
                db.execute("UPDATE meta SET value = ? WHERE name = 'model:tiny:llama'", ("f" * 64,))
            return super().__call__(cell)

    sweep = parse_sweep(TEXT.replace("horizons: [1, 2]", "horizons: [1]"))
    with Store(path) as store:
        outcome = run_sweep(replace(sweep, specs=["baseline"]), store, LocalExecutor(RepinningRunner()),
                            progress=False)
        assert outcome.done == 0 and "now pins weights sha256 ffffffffffffffff" in outcome.failed[0][1]
        assert store.cells("done") == []


def test_an_edit_between_importing_the_sweep_machinery_and_the_first_sweep_fails_its_cells(tmp_path):
    import os
    import subprocess
    import sys

    evals = tmp_path / "evals"
    evals.mkdir()
    (evals / "task.yaml").write_text("task: a\n")
    script = f"""
from pathlib import Path
from qdrift.sweep import parse_sweep, run_sweep      # the code is read here
from qdrift.store import Store
Path({str(evals / 'task.yaml')!r}).write_text("task: b\\n")   # an edit (a notebook's) before the first sweep
sweep = parse_sweep('''{TEXT.replace("horizons: [1, 2]", "horizons: [1]").replace("specs: [baseline, w8-a16-kv:16]", "specs: [baseline]")}''')
with Store({str(tmp_path / 's.sqlite')!r}) as store:
    outcome = run_sweep(sweep, store, progress=False)
print(outcome.done, outcome.failed[0][1][:60] if outcome.failed else "")
"""
    env = {**os.environ, "QDRIFT_EVALS": str(evals), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0 CodeChanged: qdrift's files (its sources, built-in environme"
