"""Run lm-eval tasks on a qdrift model and keep every item: the Python entry points.

`run_cell` is the one call a sweep executor needs for a short-form cell (a model, a task, a spec):
it quantizes, runs lm-eval with samples logged and a spec-tagged response cache, restores the
model and returns tidy per-item rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qdrift.lmeval.cache import tagged_cache_path
from qdrift.lmeval.model import QdriftLM
from qdrift.lmeval.rows import rows_from_results
from qdrift.lmeval.tasks import resolve_tasks


@dataclass
class ShortFormRun:
    """lm-eval's results dict (samples included), the tidy rows, and the wall time of the run."""

    results: dict[str, Any]
    rows: list[dict[str, Any]]
    wall_s: float
    spec: str
    model: str
    notes: list[str] = field(default_factory=list)


def evaluate(
    lm: QdriftLM,
    tasks: str | dict | list[str | dict],
    *,
    limit: int | float | None = None,
    num_fewshot: int | None = None,
    use_cache: str | Path | None = None,
    data_dir: str | Path | None = None,
    gen_kwargs: dict | None = None,
    bootstrap_iters: int = 0,
    **kwargs: Any,
) -> ShortFormRun:
    """`lm_eval.simple_evaluate` with samples logged, tasks resolved offline, and a spec-tagged cache.

    `use_cache` is a path prefix (or a directory) as in lm-eval; the model's tag
    `<model>.model-<key>.spec-<hash>.code-<hex>` is added to it so every cached answer is keyed by the
    model's weights, tokenizer and options, the spec and the code too (`qdrift.lmeval.cache`).
    """
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    if not isinstance(lm, QdriftLM):
        raise TypeError(f"lm must be a QdriftLM (it carries the spec), got {type(lm).__name__}")
    tasks = [tasks] if isinstance(tasks, (str, dict)) else list(tasks)
    specs, standard = resolve_tasks(tasks, data_dir)
    if standard:
        from qdrift.lmeval.tasks import _standard_manager

        manager = _standard_manager()
    else:
        manager = TaskManager(include_defaults=False)
    cache = None if use_cache is None else tagged_cache_path(use_cache, lm.base_name, lm.checked_cache_key())
    start = time.perf_counter()
    results = simple_evaluate(
        model=lm, tasks=specs, limit=limit, num_fewshot=num_fewshot, use_cache=cache, log_samples=True,
        task_manager=manager, gen_kwargs=gen_kwargs, bootstrap_iters=bootstrap_iters, **kwargs,
    )
    wall = time.perf_counter() - start
    rows = rows_from_results(results, model=lm.base_name, spec=lm.spec_str, spec_hash=lm.spec_hash)
    notes = sorted({r["note"] for r in rows if r["note"]})
    return ShortFormRun(results=results, rows=rows, wall_s=wall, spec=lm.spec_str, model=lm.base_name, notes=notes)


def run_cell(
    model: Any,
    tokenizer: Any,
    task: str | dict | list[str | dict],
    spec: str | None,
    limit: int | float | None = None,
    *,
    name: str | None = None,
    batch_size: int = 1,
    calibration: Any = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """Tidy per-item rows of `task` on `model` quantized with `spec` (None: the model as it is).

    The model is quantized in place for the run and restored afterwards if this call quantized it
    (an already-quantized model is used as is, and its spec must match). Keyword arguments go to
    `evaluate` (num_fewshot, use_cache, data_dir, gen_kwargs, ...).
    """
    from qdrift.quant import restore

    lm = QdriftLM(pretrained=model, tokenizer=tokenizer, spec=spec, name=name, batch_size=batch_size,
                  calibration=calibration)
    try:
        return evaluate(lm, task, limit=limit, **kwargs).rows
    finally:
        if lm.applied_here:
            restore(model)
