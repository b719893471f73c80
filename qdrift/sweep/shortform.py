"""The seam for short-form (per-item) benchmarks in a sweep: runners looked up by name.

A sweep task `{kind: short_form, runner: lmeval, task: gsm8k, limit: 200, options: {...}}` runs
`runner(model, tokenizer, task)` with the (quantized) model, where `task` is the sweep's
`ShortFormTask`. It returns one dict per item, each with at least

    item      an id unique within the task (pairs the baseline's and each variant's answer)
    correct   the item's outcome: bool, or a score in [0, 1]

and any other fields it likes; they are stored as the cell's "item" rows.

A runner registers itself with `register(name, fn)`. Runners that ship in another qdrift module
are listed in `PROVIDERS` and imported on first use, so `lmeval` becomes available as soon as
`qdrift.lmeval.sweep` exists and calls `register("lmeval", ...)` at import.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any

ShortFormRunner = Callable[[Any, Any, Any], list[dict]]

# name -> the module that registers it when imported
PROVIDERS: dict[str, str] = {"lmeval": "qdrift.lmeval.sweep", "bfcl": "qdrift.bfcl.sweep"}
_RUNNERS: dict[str, ShortFormRunner] = {}
_CHECKS: dict[str, Callable[[str], str | None]] = {}
REQUIRED_FIELDS = ("item", "correct")


class RunnerUnavailable(NotImplementedError):
    """A short-form runner the sweep names is not registered (its provider is missing)."""


def register(name: str, runner: ShortFormRunner, check_task: Callable[[str], str | None] | None = None) -> None:
    """Make `runner` available to sweep tasks as `runner: <name>`. `check_task(task)` (optional) says
    what is wrong with a task name, or None: a sweep file is then checked before any cell runs."""
    if not callable(runner):
        raise TypeError(f"short-form runner {name!r} must be callable, got {type(runner).__name__}")
    _RUNNERS[name] = runner
    if check_task is not None:
        _CHECKS[name] = check_task
    else:
        _CHECKS.pop(name, None)


def unregister(name: str) -> None:
    _RUNNERS.pop(name, None)
    _CHECKS.pop(name, None)


def task_problem(runner: str, task: str) -> str | None:
    """What the runner's own check finds wrong with `task` (None: fine, or the runner checks nothing)."""
    check = _CHECKS.get(runner)
    return check(task) if check is not None else None


def names() -> list[str]:
    """Every runner name a sweep may use: registered ones and those a qdrift module provides."""
    return sorted(set(_RUNNERS) | set(PROVIDERS))


def lookup(name: str) -> ShortFormRunner:
    """The runner registered as `name`, importing its provider module if need be."""
    if name not in _RUNNERS and name in PROVIDERS:
        module = PROVIDERS[name]
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise RunnerUnavailable(
                f"short-form runner {name!r} is not available: it is provided by {module}, which is not "
                f"installed ({e}); register one with qdrift.sweep.shortform.register({name!r}, fn)") from None
        if name not in _RUNNERS:
            raise RunnerUnavailable(f"short-form runner {name!r} is not available: {module} imported but did not "
                                    f"call qdrift.sweep.shortform.register({name!r}, fn)")
    if name not in _RUNNERS:
        close = difflib.get_close_matches(name, names(), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise RunnerUnavailable(f"Unknown short-form runner '{name}'.{hint} Available: {', '.join(names())}")
    return _RUNNERS[name]


def check_items(name: str, rows: list[dict]) -> list[dict]:
    """The runner's rows, checked for the fields every analysis pairs and scores on."""
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise TypeError(f"short-form runner {name!r} must return a list of dicts, got {type(rows).__name__}")
    for i, r in enumerate(rows):
        missing = [f for f in REQUIRED_FIELDS if f not in r]
        if missing:
            raise ValueError(f"short-form runner {name!r}: row {i} lacks field(s) {missing}; every row needs "
                             f"{list(REQUIRED_FIELDS)}, it has {sorted(r)}")
    return rows
