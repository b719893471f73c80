"""Reading BFCL data from the installed bfcl-eval and converting its function docs to tool schemas."""

from __future__ import annotations

import importlib.util

import jsonschema
import pytest

from qdrift.bfcl import data
from qdrift.envs.base import ToolCall
from qdrift.envs.schema import ToolSchemas
from tests.bfcl.conftest import requires_bfcl


def _walk_types(schema):
    if isinstance(schema, dict):
        if "type" in schema:
            yield schema["type"]
        for sub in schema.get("properties", {}).values():
            yield from _walk_types(sub)
        if "items" in schema:
            yield from _walk_types(schema["items"])


@requires_bfcl
@pytest.mark.parametrize("category", ["simple", "multiple", "parallel", "live_simple"])
def test_real_function_docs_convert_to_valid_json_schemas(category):
    items = data.load_category(category, limit=120)
    assert len(items) == 120 and all(i["answers"] for i in items)
    for item in items:
        for tool in data.to_tools(item["functions"]):
            params = tool["function"]["parameters"]
            jsonschema.Draft202012Validator.check_schema(params)
            assert params["type"] == "object"
            assert not {"dict", "float", "tuple", "any"} & set(_walk_types(params)), item["id"]


@requires_bfcl
def test_bfcl_types_map_to_json_schema_types():
    functions = {f["name"]: f for c in ("simple", "multiple", "parallel") for i in data.load_category(c)
                 for f in i["functions"]}
    kinds = {}
    for f in functions.values():
        for name, prop in f["parameters"]["properties"].items():
            kinds.setdefault(prop["type"], (f, name))
    for bfcl_type, want in [("float", "number"), ("dict", "object"), ("tuple", "array"), ("integer", "integer")]:
        f, name = kinds[bfcl_type]
        assert data.to_tool(f)["function"]["parameters"]["properties"][name]["type"] == want
    assert data.convert_schema({"type": "any", "description": "x"}) == {"description": "x"}
    with pytest.raises(ValueError, match="unknown BFCL type 'complex'"):
        data.convert_schema({"type": "complex"})


@requires_bfcl
def test_possible_answers_validate_against_the_converted_schema():
    checked = 0
    for item in data.load_category("simple", limit=100):
        schemas = ToolSchemas(data.to_tools(item["functions"]))
        props = item["functions"][0]["parameters"]["properties"]
        name, params = next(iter(item["answers"][0].items()))
        if any(props[p]["type"] in ("dict", "array", "tuple") for p in params):
            continue  # nested answers list allowed values per key; not a call as they stand
        args = {p: next(a for a in allowed if a != "") for p, allowed in params.items() if allowed != [""]}
        call, err = schemas.check(ToolCall(name, args))
        assert err is None, (item["id"], err)
        checked += 1
    assert checked > 80


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "bfcl_eval" else real(n, *a))
    with pytest.raises(data.BFCLNotInstalled, match=r'pip install --no-deps "bfcl-eval==2026\.3\.23"'):
        data.load_category("simple", 1)


@requires_bfcl
def test_category_errors_name_the_valid_ones():
    with pytest.raises(ValueError, match="Did you mean 'simple'.*Available: simple, multiple"):
        data.load_category("simpel")
    with pytest.raises(NotImplementedError, match="'irrelevance' is not supported: it is scored on abstaining"):
        data.load_category("irrelevance")
    with pytest.raises(ValueError, match="limit must be a positive integer"):
        data.load_category("simple", 0)


@requires_bfcl
def test_installed_version_is_the_documented_one():
    assert data.installed_version() == data.BFCL_VERSION
