"""Read Berkeley Function Calling Leaderboard (BFCL v4) data from the installed `bfcl-eval` package.

bfcl-eval pins numpy 1.26.4 and a dozen provider SDKs, so it is installed with `--no-deps` and
qdrift never imports the parts of it that need those: this module finds the package with
`importlib.util.find_spec` and reads its JSON-lines data files directly. It also converts BFCL's
function docs (a JSON-schema dialect with `dict`, `float`, `tuple` and `any` types) to OpenAI
function-calling tool schemas that `jsonschema` can check.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

BFCL_VERSION = "2026.3.23"
INSTALL_COMMAND = f'pip install --no-deps "bfcl-eval=={BFCL_VERSION}"'

# qdrift category name -> BFCL file stem (BFCL_v4_<stem>.json in data/ and data/possible_answer/)
SINGLE_CALL = {
    "simple": "simple_python",
    "multiple": "multiple",
    "parallel": "parallel",
    "parallel_multiple": "parallel_multiple",
    "live_simple": "live_simple",
    "live_multiple": "live_multiple",
    "live_parallel": "live_parallel",
    "live_parallel_multiple": "live_parallel_multiple",
}
MULTI_TURN = {"multi_turn_base": "multi_turn_base", "multi_turn_long_context": "multi_turn_long_context"}
# BFCL categories qdrift does not run, and why (named in the error when asked for one).
NOT_BUILT = {
    "simple_java": "its answers are Java source strings, checked with BFCL's Java type converters",
    "simple_javascript": "its answers are JavaScript source strings, checked with BFCL's JS type converters",
    "irrelevance": "it is scored on abstaining from any call, which the short-form runner does not score",
    "live_irrelevance": "it is scored on abstaining from any call, which the short-form runner does not score",
    "live_relevance": "it is scored on making any call at all, which the short-form runner does not score",
    "multi_turn_miss_param": "its turns expect the model to ask for a missing parameter (no call)",
    "multi_turn_miss_func": "it reveals functions mid-episode, which the agent environment does not do",
    "memory": "it needs bfcl-eval's memory backends (sentence-transformers, faiss, rank_bm25)",
    "web_search": "it needs the network and bfcl-eval's web-search backend (serpapi, html2text)",
    "format_sensitivity": "it varies BFCL's own prompt formats, which qdrift does not reproduce",
}

# BFCL type names -> JSON Schema types ("any" becomes no type constraint at all).
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "integer": "integer", "string": "string",
          "boolean": "boolean", "array": "array", "object": "object", "number": "number", "null": "null"}


class BFCLNotInstalled(ModuleNotFoundError):
    """bfcl-eval is not installed; the message says how to install it."""


def package_dir() -> Path:
    """The installed bfcl_eval package folder, found without importing it."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BFCLNotInstalled(
            f"the BFCL data comes from the bfcl-eval package, which is not installed; install it with "
            f"`{INSTALL_COMMAND}` (--no-deps: it pins numpy 1.26.4 and provider SDKs qdrift does not need)")
    return Path(list(spec.submodule_search_locations)[0])


def data_dir() -> Path:
    return package_dir() / "data"


def installed_version() -> str:
    """The installed bfcl-eval version, read from its distribution metadata."""
    from importlib.metadata import version

    return version("bfcl-eval")


def category_stem(category: str, kinds: dict[str, str]) -> str:
    """BFCL's file stem for `category`, or a ValueError naming the valid categories (and why a known
    BFCL category is not built)."""
    if category in kinds:
        return kinds[category]
    if category in NOT_BUILT:
        raise NotImplementedError(f"BFCL category {category!r} is not supported: {NOT_BUILT[category]}; "
                                  f"supported: {', '.join(kinds)}")
    close = difflib.get_close_matches(category, list(kinds), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(f"Unknown BFCL category {category!r}.{hint} Available: {', '.join(kinds)}")


@lru_cache(maxsize=32)
def _read_jsonl(path: str) -> tuple[dict, ...]:
    with open(path, encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f if line.strip())


def read_entries(stem: str) -> list[dict]:
    """The entries of data/BFCL_v4_<stem>.json (deep copies; callers may mutate them)."""
    return copy.deepcopy(list(_read_jsonl(str(data_dir() / f"BFCL_v4_{stem}.json"))))


def read_answers(stem: str) -> dict[str, Any]:
    """id -> ground truth, from data/possible_answer/BFCL_v4_<stem>.json."""
    rows = _read_jsonl(str(data_dir() / "possible_answer" / f"BFCL_v4_{stem}.json"))
    return {r["id"]: copy.deepcopy(r["ground_truth"]) for r in rows}


def load_category(category: str, limit: int | None = None) -> list[dict]:
    """A single-call category's items, in file order: each {id, messages, functions, answers}.

    `messages` is the (single) turn of chat messages, `functions` BFCL's function docs and
    `answers` BFCL's possible answers: a list of {function name: {param: [allowed values]}}.
    """
    stem = category_stem(category, SINGLE_CALL)
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
    answers = read_answers(stem)
    items = []
    for entry in read_entries(stem)[:limit]:
        if len(entry["question"]) != 1:
            raise ValueError(f"BFCL item {entry['id']} has {len(entry['question'])} turns; expected one")
        items.append({"id": entry["id"], "messages": entry["question"][0], "functions": entry["function"],
                      "answers": answers[entry["id"]]})
    return items


def convert_schema(schema: Any) -> Any:
    """One BFCL parameter schema as JSON Schema: `dict`->object, `float`->number, `tuple`->array,
    `any`-> no type constraint; BFCL's non-standard `optional` flag is dropped; nested
    `properties` and `items` are converted too."""
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type":
            if value == "any":
                continue
            if value not in _TYPES:
                raise ValueError(f"unknown BFCL type {value!r}; known: {', '.join(sorted(_TYPES))}, any")
            out["type"] = _TYPES[value]
        elif key == "properties" and isinstance(value, dict):
            out["properties"] = {name: convert_schema(sub) for name, sub in value.items()}
        elif key == "items":
            out["items"] = convert_schema(value)
        elif key == "optional":
            continue
        else:
            out[key] = copy.deepcopy(value)
    return out


def to_tool(function: dict) -> dict:
    """A BFCL function doc as an OpenAI function-calling tool schema."""
    params = convert_schema(function.get("parameters") or {"type": "dict", "properties": {}})
    params.setdefault("type", "object")
    params.setdefault("properties", {})
    return {"type": "function", "function": {"name": function["name"],
                                             "description": function.get("description", ""),
                                             "parameters": params}}


def to_tools(functions: list[dict]) -> list[dict]:
    return [to_tool(f) for f in functions]
