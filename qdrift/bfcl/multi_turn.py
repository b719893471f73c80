"""BFCL multi-turn tasks: their data, their executable backends, and BFCL's per-turn state check.

BFCL's own executor (`multi_turn_utils.execute_multi_turn_func_call`) turns call strings into
Python with `eval`; qdrift never evaluates model output, so calls go through here instead:

* the ground-truth strings (``cd(folder='document')``, ``sort('final_report.pdf')``) are parsed
  with `ast` and their arguments read with `ast.literal_eval`; positional arguments are named
  from the backend method's signature;
* a call is executed by looking the method up by name among the public methods of the entry's
  backend instances (BFCL's classes, `bfcl_eval...func_source_code`, which import cleanly with
  qdrift's dependencies; mpmath comes with torch) and calling it with keyword arguments;
* results are turned into text as BFCL does (strings as they are, dicts as JSON, else `str`), an
  exception into ``Error during execution: ...``; so is a call whose arguments ask for a computation
  that would not finish (a power of a trillion digits: `cost_bounds`);
* a turn passes when BFCL's own `state_checker` and `response_checker` (imported from
  `multi_turn_checker`, which needs nothing missing) accept the model's instances and results
  against the ground truth's, executed on separate instances.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from functools import lru_cache
from typing import Any

from qdrift.bfcl.cost_bounds import unbounded_cost
from qdrift.bfcl.data import MULTI_TURN, category_stem, data_dir, read_answers, read_entries
from qdrift.envs.base import ToolCall


def load_multi_turn(category: str = "multi_turn_base") -> list[dict]:
    """Entries of a multi-turn category: {id, turns (lists of messages), ground_truth (a list of
    call strings per turn), involved_classes, initial_config, functions (the docs shown), long_context}.

    Left out: entries with a turn whose ground truth is empty (the model should make no call), and
    entries whose own ground truth does not validate against BFCL's function docs (in 2026.3.23,
    multi_turn_*_173 passes ticket_id='ticket_001' where the doc says integer)."""
    return copy.deepcopy(_usable_entries(category))


def usable_entry_ids(category: str = "multi_turn_base") -> list[str]:
    """The ids of `load_multi_turn(category)`'s entries, in order, without copying the entries."""
    return [e["id"] for e in _usable_entries(category)]


@lru_cache(maxsize=4)
def _usable_entries(category: str) -> list[dict]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    stem = category_stem(category, MULTI_TURN)
    answers = read_answers(stem)
    out = []
    for entry in read_entries(stem):
        truth = answers[entry["id"]]
        if any(len(turn) == 0 for turn in truth):
            continue
        functions = []
        for cls in entry["involved_classes"]:
            path = data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]
            functions += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        excluded = set(entry.get("excluded_function", []))
        methods = method_table({c: backend_class(c)() for c in entry["involved_classes"]})
        schemas = _schemas(tuple(entry["involved_classes"]))
        if any(schemas.check(parse_call_string(s, methods))[1] for turn in truth for s in turn):
            continue
        out.append({"id": entry["id"], "turns": entry["question"], "ground_truth": truth,
                    "involved_classes": entry["involved_classes"], "initial_config": entry["initial_config"],
                    "functions": [f for f in functions if f["name"] not in excluded],
                    "long_context": "long_context" in category})
    return out


@lru_cache(maxsize=64)
def _schemas(classes: tuple[str, ...]):
    """The validators of every function of `classes` (building them is the slow part of loading)."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    from qdrift.bfcl.data import to_tools
    from qdrift.envs.schema import ToolSchemas

    functions = []
    for cls in classes:
        path = data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]
        functions += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return ToolSchemas(to_tools(functions))


def backend_class(class_name: str) -> type:
    """BFCL's executable backend class, or an ImportError naming what it needs that is missing."""
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    if class_name not in CLASS_FILE_PATH_MAPPING:
        raise ValueError(f"unknown BFCL backend class {class_name!r}; known: {', '.join(CLASS_FILE_PATH_MAPPING)}")
    module = CLASS_FILE_PATH_MAPPING[class_name]
    try:
        return getattr(importlib.import_module(module), class_name)
    except ModuleNotFoundError as e:
        raise ImportError(f"BFCL backend {class_name} ({module}) needs the package {e.name!r}, which bfcl-eval "
                          f"declares but qdrift does not install (bfcl-eval is installed with --no-deps)") from e


def make_instances(entry: dict) -> dict[str, Any]:
    """Fresh backend instances for an entry, each loaded with (a copy of) its initial state."""
    from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

    instances = {}
    for name in entry["involved_classes"]:
        obj = backend_class(name)()
        if name not in STATELESS_CLASSES:
            obj._load_scenario(copy.deepcopy(entry["initial_config"].get(name, {})),
                               long_context=entry["long_context"])
        instances[name] = obj
    return instances


def method_table(instances: dict[str, Any]) -> dict[str, Any]:
    """Public method name -> bound method; as in BFCL, a later class wins a shared name."""
    table = {}
    for obj in instances.values():
        for name, method in inspect.getmembers(obj, predicate=inspect.ismethod):
            if not name.startswith("_"):
                table[name] = method
    return table


def parse_call_string(text: str, methods: dict[str, Any]) -> ToolCall:
    """A ground-truth call string as a ToolCall with named arguments (no evaluation of code)."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain function call: {text!r}")
    name = node.func.id
    if name not in methods:
        raise ValueError(f"call {text!r} names {name!r}, which no involved backend defines")
    args = [ast.literal_eval(a) for a in node.args]
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    bound = inspect.signature(methods[name]).bind(*args, **kwargs)
    return ToolCall(name, dict(bound.arguments))


def canonical(call: ToolCall, methods: dict[str, Any]) -> tuple | None:
    """(name, arguments with defaults filled in) for comparing calls; None when they do not bind."""
    method = methods.get(call.name)
    if method is None:
        return None
    try:
        bound = inspect.signature(method).bind(**call.arguments)
    except TypeError:
        return None
    bound.apply_defaults()
    return call.name, json.dumps(_integral_floats_as_ints(bound.arguments), sort_keys=True, default=str)


def _integral_floats_as_ints(value: Any) -> Any:
    """166.0 -> 166 throughout, so equal numbers compare equal (json.dumps writes them differently)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_integral_floats_as_ints(v) for v in value]
    return value


def execute(call: ToolCall, methods: dict[str, Any]) -> str:
    """Run `call` on the backends (a method looked up by name, keyword arguments); BFCL's result text."""
    method = methods.get(call.name)
    if method is None:
        return f"Error during execution: no function named {call.name!r}"
    too_costly = unbounded_cost(method, call.arguments)
    if too_costly:
        return f"Error during execution: {too_costly}"
    try:
        result = method(**call.arguments)
        if isinstance(result, str):
            return result
        if isinstance(result, dict):
            try:
                return json.dumps(result)
            except (TypeError, ValueError):
                pass
        return str(result)  # inside the try: str() of a huge integer raises
    except Exception as e:  # noqa: BLE001 - a failing call is an observation, as in BFCL
        return f"Error during execution: {e}"


def check_turn(model_instances: dict, truth_instances: dict, model_results: list[str],
               truth_results: list[str], turn: int) -> dict:
    """BFCL's verdict after a turn: {"valid": bool, ...} from its state and response checkers."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import response_checker, state_checker

    verdict = state_checker(model_instances, truth_instances)
    if not verdict["valid"]:
        return verdict
    return response_checker(model_results, truth_results, turn)
