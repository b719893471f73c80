"""Run one cell in this process: the model quantized by the cell's spec, then its task.

Agent cells run the ordinary episode runner (`run_episodes` with `HFPolicy`: greedy, the KV cache
reused across steps, `batch` episodes in lockstep) on the cell's held-out seeds; short-form cells
call the runner registered under the task's name (`qdrift.sweep.shortform`). A variant's agent
cell with `drift: true` also runs the baseline on the same seeds, recording its tokens, and replays
those episodes through the variant teacher-forced (`qdrift.envs.drift`): "drift" rows, one per
generated token. The baseline is greedy, so these are the baseline cell's own episodes: the runner
keeps the tokens of every baseline episode it ran or recorded (token ids only, keyed by model,
task, horizon and batch of seeds), so in one process the baseline runs once per horizon, and a
cell on a fresh worker records them itself. Every cell stays independent of the others (any
order, any worker).

An agent cell runs in chunks of `batch` seeds. Given `chunks` (the local executor gives one bound
to the store: `StoreChunks`), each finished chunk but the last is kept, and a rerun of a cell whose
run was killed takes the kept chunks instead of running them again. A chunk depends only on its
seeds (fresh environments and a fresh policy per chunk), so a resumed cell's rows equal an
uninterrupted run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from qdrift.sweep.cells import Cell
from qdrift.sweep.file import BASELINE, AgentTask
from qdrift.sweep.models import ModelCache


@dataclass
class StoreChunks:
    """One cell's finished chunks, kept in the store with the code that measured them (Store.save_chunk)."""

    store: Any  # qdrift.store.Store
    cell_key: str
    code: str | None

    def load(self, chunk: str) -> dict[str, list[dict]] | None:
        return self.store.chunk_rows(self.cell_key, chunk, self.code)

    def save(self, chunk: str, rows: dict[str, list[dict]]) -> None:
        self.store.save_chunk(self.cell_key, chunk, rows, self.code)


class CellRunner:
    """Callable cell -> {row kind: rows}, holding the model cache across cells."""

    def __init__(self, models: ModelCache | None = None, batch: int = 50, dtype: str | None = None,
                 device: str | None = None):
        self.models = models or ModelCache(dtype=dtype, device=device)
        self.batch = batch
        self.baseline_traces: dict[tuple, list] = {}  # (model, task, horizon, seeds) -> the baseline's token traces
        self.chunk_store: tuple[Any, str | None] | None = None  # (store, code): keep agent cells' finished chunks

    def __call__(self, cell: Cell) -> dict[str, list[dict]]:
        from qdrift.quant import reseed_rounding

        _same_environment_file(cell)  # the calibration's too, read as the variant is made
        model, tokenizer = self.models.get(cell.model, cell.spec, cell.calibration)
        _same_environment_file(cell)  # edited while the calibration trajectories were rendered
        # A variant is kept across cells of its spec: its stochastic rounding starts over in each, so that
        # a cell's results do not depend on which cells this process ran before it.
        reseed_rounding(model)
        if isinstance(cell.task, AgentTask):
            drift = cell.task.drift and cell.spec != BASELINE
            baseline = self.models.get(cell.model, BASELINE)[0] if drift else None
            traces = self.baseline_traces if cell.task.drift else None
            chunks = StoreChunks(self.chunk_store[0], cell.key, self.chunk_store[1]) if self.chunk_store else None
            rows = run_agent_cell(model, tokenizer, cell, self.batch, baseline=baseline, traces=traces, chunks=chunks)
            _same_environment_file(cell)  # edited while the cell ran: its rows may come from either file
            return rows
        return run_short_form_cell(model, tokenizer, cell)


def _same_environment_file(cell: Cell) -> None:
    """Refuse to run (or keep) a cell whose path environment's file (its task's, or its calibration's)
    changed since the cell was made: the registry reloads an edited file, and the cell's key names the
    file it was made from."""
    from qdrift.envs.registry import path_source_sha256

    made = []
    if cell.env_sha256 is not None:
        made.append(("environment", cell.task.env, cell.env_sha256))
    if cell.calibration is not None and cell.calibration.env_sha256 is not None:
        made.append(("calibration environment", cell.calibration.env, cell.calibration.env_sha256))
    for what, ref, then in made:
        now = path_source_sha256(ref)
        if now != then:
            raise RuntimeError(
                f"the {what} file of {ref!r} changed since this sweep started (sha256 {then[:10]}... then, "
                f"{now[:10]}... now): this cell's key names the file it was made from. "
                "Rerun the sweep to measure the edited file under its own keys")


def run_agent_cell(model, tokenizer, cell: Cell, batch: int = 50, baseline=None,
                   traces: dict | None = None, chunks: StoreChunks | None = None) -> dict[str, list[dict]]:
    """Episodes of the cell's environment at its horizon, one per seed: episode and step rows, and
    with a `baseline` model the teacher-forced drift of `model` along the baseline's episodes.
    `chunks`: keep each finished chunk of seeds but the last, and take the ones already kept.

    `traces` caches the baseline's token traces per (model, task, horizon, seeds): the baseline cell
    itself (`baseline` None) fills it as it runs, and a variant cell records what is missing."""
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.drift import drift_rows, record_baseline
    from qdrift.envs.prompting import tool_prompt_for
    from qdrift.envs.registry import make_environment
    from qdrift.envs.runner import run_episodes

    task: AgentTask = cell.task
    prompt = tool_prompt_for(tokenizer, **dict(task.prompt))
    if task.sampling:
        return _sampled_cell(model, tokenizer, prompt, cell, batch, chunks)
    seeds = list(task.seeds)

    def run_chunk(start: int, chunk: list[int]) -> dict[str, list[dict]]:
        def envs():  # fresh instances for each run over this chunk of seeds
            return [make_environment(task.env, horizon=cell.horizon, seed=s, split="eval", **dict(task.knobs))
                    for s in chunk]

        key = (cell.model, task, cell.horizon, tuple(chunk))
        policy = HFPolicy(model, tokenizer, prompt, max_new_tokens=task.max_new_tokens,
                          record_tokens=traces is not None and baseline is None)  # the baseline cell records
        e, s = run_episodes(policy, envs(), first_id=start)
        made = {"episode": [r.row() for r in e], "step": [r.row() for r in s]}
        if policy.record_tokens:
            traces[key] = [list(t) for t in policy.token_trace]
        if baseline is not None:
            if traces is None or key not in traces:
                base_policy = HFPolicy(baseline, tokenizer, prompt, max_new_tokens=task.max_new_tokens)
                recorded = record_baseline(base_policy, envs(), first_id=start)[2]
                if traces is not None:
                    traces[key] = recorded
            else:
                recorded = traces[key]
            made["drift"] = drift_rows(baseline, model, recorded, chunk, first_id=start, env=task.env,
                                       horizon=cell.horizon)
        return made

    kinds = ("episode", "step", "drift") if baseline is not None else ("episode", "step")
    return _in_chunks(seeds, batch, chunks, run_chunk, kinds)


def _in_chunks(seeds: list[int], size: int, chunks: StoreChunks | None, run_chunk, kinds: tuple[str, ...]
               ) -> dict[str, list[dict]]:
    """`run_chunk(start, seeds)` over `seeds` in chunks of `size`, rows joined in order; with `chunks`, a
    chunk kept by an earlier run is taken instead, and each one run but the last is kept (the last is
    recorded with the cell)."""
    rows: dict[str, list[dict]] = {kind: [] for kind in kinds}
    for start in range(0, len(seeds), size):
        chunk = seeds[start:start + size]
        name = ",".join(map(str, chunk))
        made = None if chunks is None else chunks.load(name)
        if made is None:
            made = run_chunk(start, chunk)
            if chunks is not None and start + size < len(seeds):
                chunks.save(name, made)
        for kind in kinds:
            rows[kind] += made.get(kind, [])
    return rows


def _sampled_cell(model, tokenizer, prompt, cell: Cell, batch: int, chunks: StoreChunks | None = None
                  ) -> dict[str, list[dict]]:
    """k sampled episodes per seed (`trial` 0..k-1, policy seed `seed + trial`), `batch` (seed, trial)
    pairs in lockstep: a trial's trajectory does not depend on its batch (qdrift.envs.trials), so the
    seeds go in chunks of batch // k (at least one), each a resumable chunk, with the episode ids an
    unchunked run gives."""
    from qdrift.backends.hf import HFPolicy
    from qdrift.envs.trials import run_trials

    task: AgentTask = cell.task
    opts = task.sampling_options()
    k = opts["samples"]

    def run_chunk(start: int, chunk: list[int]) -> dict[str, list[dict]]:
        e, s = run_trials(
            lambda: HFPolicy(model, tokenizer, prompt, max_new_tokens=task.max_new_tokens,
                             temperature=opts["temperature"], top_p=opts["top_p"], seed=opts["seed"]),
            task.env, cell.horizon, chunk, k, batch_size=batch, split="eval", with_steps=True,
            first_id=start * k, **dict(task.knobs))
        return {"episode": [r.row() for r in e], "step": [r.row() for r in s]}

    return _in_chunks(list(task.seeds), max(1, batch // k), chunks, run_chunk, ("episode", "step"))


def run_short_form_cell(model, tokenizer, cell: Cell) -> dict[str, list[dict]]:
    """The registered short-form runner's per-item rows, checked for `item` and `correct`."""
    from qdrift.sweep import shortform

    runner = shortform.lookup(cell.task.runner)
    return {"item": shortform.check_items(cell.task.runner, runner(model, tokenizer, cell.task))}
