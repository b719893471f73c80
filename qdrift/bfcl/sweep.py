"""The `bfcl` short-form runner for sweeps: a BFCL single-call category on the cell's model.

Sweep task: `{kind: short_form, runner: bfcl, task: simple, limit: 20, options: {max_new_tokens: 128}}`;
`task` is the BFCL category (qdrift.bfcl.data.SINGLE_CALL). Registered on import.
"""

from __future__ import annotations

from typing import Any

from qdrift.sweep.shortform import register


def run_bfcl_task(model: Any, tokenizer: Any, task: Any) -> list[dict]:
    from qdrift.bfcl.shortform import run_bfcl

    return run_bfcl(model, tokenizer, task.task, task.limit, **dict(task.options))


def check_category(task: str) -> str | None:
    from qdrift.bfcl.data import SINGLE_CALL, category_stem

    try:
        category_stem(task, SINGLE_CALL)
    except (ValueError, NotImplementedError) as e:
        return str(e)
    return None


register("bfcl", run_bfcl_task, check_category)
