"""The `lmeval` short-form runner for sweeps: one lm-eval task on the cell's (quantized) model.

Registered with `qdrift.sweep.shortform` on import, which the sweep does the first time a sweep
file names `runner: lmeval`. The sweep has already quantized the model, so the spec is read from
the model itself (`spec=None`); the task's `options` go to `run_cell` (num_fewshot, gen_kwargs, ...).
"""

from __future__ import annotations

from typing import Any

from qdrift.sweep.shortform import register


def run_lmeval_task(model: Any, tokenizer: Any, task: Any) -> list[dict]:
    """Tidy per-item rows, each with `item` ("task/filter/doc_id") and `correct` added for pairing.

    lm-eval's `model` (the path it loaded) becomes `model_path`, so that the store's `model` column
    stays the sweep's model name, the same as on the cell's agent rows.
    """
    from qdrift.lmeval.run import run_cell

    rows = run_cell(model, tokenizer, task.task, None, limit=task.limit, **dict(task.options))
    return [{**{k: v for k, v in r.items() if k != "model"}, "model_path": r.get("model"),
             "item": f"{r['task']}/{r['filter']}/{r['doc_id']}", "correct": r["correct"]} for r in rows]


def check_task(name: str) -> str | None:
    """A task name qdrift resolves (its evals/ tasks, gsm8k_local, mmlu_local_<subject>) or one in
    lm-eval's own index (built once per process, a few seconds), else what is wrong."""
    from qdrift.lmeval.tasks import _standard_manager, own_tasks, resolve_tasks
    from qdrift.spec.model import did_you_mean

    try:  # the names qdrift resolves itself, as a run resolves them (an unknown MMLU subject included)
        _, standard = resolve_tasks([name])
    except (ValueError, FileNotFoundError) as e:
        return str(e)
    if not standard:
        return None
    index = _standard_manager().task_index
    if name in index:
        return None
    return f"no lm-eval task {name!r} (qdrift's own: {', '.join(sorted(own_tasks()))}, or lm-eval's index).{did_you_mean(name, [*own_tasks(), *index])}"


register("lmeval", run_lmeval_task, check_task)
