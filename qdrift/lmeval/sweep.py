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


register("lmeval", run_lmeval_task)
