"""BFCL's AST match: hand-written verdicts, and agreement with bfcl-eval's own checker on real items."""

from __future__ import annotations

import collections
import importlib
import random
import sys
import types

import pytest

from qdrift.bfcl.ast_match import ast_match, match_call
from qdrift.envs.base import ToolCall
from tests.bfcl.conftest import requires_bfcl

TRIANGLE = {"name": "calculate_triangle_area", "parameters": {"type": "dict", "properties": {
    "base": {"type": "integer"}, "height": {"type": "integer"}, "unit": {"type": "string"}},
    "required": ["base", "height"]}}
TRIANGLE_ANSWER = {"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["units", ""]}}
SCALE = {"name": "scale", "parameters": {"type": "dict", "properties": {
    "x": {"type": "float"}, "tags": {"type": "array", "items": {"type": "string"}}}, "required": ["x"]}}
SCALE_ANSWER = {"scale": {"x": [2.0], "tags": [["Big Red"], ""]}}


def verdict(function, args, answer, name=None):
    return match_call(function, ToolCall(name or function["name"], args), answer)


def test_right_call_matches():
    assert verdict(TRIANGLE, {"base": 10, "height": 5, "unit": "units"}, TRIANGLE_ANSWER)


def test_wrong_value_fails():
    v = verdict(TRIANGLE, {"base": 11, "height": 5}, TRIANGLE_ANSWER)
    assert not v and v.error_type == "value_error:others"


def test_missing_required_fails():
    v = verdict(TRIANGLE, {"base": 10}, TRIANGLE_ANSWER)
    assert not v and v.error_type == "missing_required"


def test_optional_parameter_may_be_omitted():
    assert verdict(TRIANGLE, {"base": 10, "height": 5}, TRIANGLE_ANSWER)


def test_omitting_a_parameter_the_answer_requires_fails():
    answer = {"calculate_triangle_area": {"base": [10], "height": [5], "unit": ["cm"]}}
    v = verdict(TRIANGLE, {"base": 10, "height": 5}, answer)
    assert not v and v.error_type == "missing_optional"


def test_wrong_function_and_unexpected_parameter_fail():
    assert verdict(TRIANGLE, {"base": 10, "height": 5}, TRIANGLE_ANSWER, name="area").error_type == "wrong_func_name"
    v = verdict(TRIANGLE, {"base": 10, "height": 5, "colour": "red"}, TRIANGLE_ANSWER)
    assert not v and v.error_type == "unexpected_param"


def test_type_coercions_bfcl_allows_and_refuses():
    assert verdict(SCALE, {"x": 2}, SCALE_ANSWER)  # int for float
    assert not verdict(SCALE, {"x": "2.0"}, SCALE_ANSWER)  # string for float
    assert not verdict(TRIANGLE, {"base": True, "height": 5}, TRIANGLE_ANSWER)  # bool is not int
    assert not verdict(TRIANGLE, {"base": 10.0, "height": 5}, TRIANGLE_ANSWER)  # float for integer


def test_strings_compare_after_bfcl_standardization():
    assert verdict(TRIANGLE, {"base": 10, "height": 5, "unit": " Units."}, TRIANGLE_ANSWER)
    assert not verdict(TRIANGLE, {"base": 10, "height": 5, "unit": "meters"}, TRIANGLE_ANSWER)
    assert verdict(SCALE, {"x": 2.0, "tags": ["big-red"]}, SCALE_ANSWER)
    assert not verdict(SCALE, {"x": 2.0, "tags": ["big", "red"]}, SCALE_ANSWER)


def test_parallel_calls_match_in_any_order_and_count():
    answers = [{"scale": {"x": [1.0]}}, {"scale": {"x": [2.0]}}]
    calls = [ToolCall("scale", {"x": 2.0}), ToolCall("scale", {"x": 1.0})]
    assert ast_match([SCALE], calls, answers, "parallel")
    assert not ast_match([SCALE], calls[:1], answers, "parallel")
    assert not ast_match([SCALE], [calls[0], calls[0]], answers, "parallel")
    assert not ast_match([SCALE, TRIANGLE], calls, [answers[0]], "multiple")


# ------------------------------------------------------------------ bfcl-eval's checker as reference


@pytest.fixture(scope="module")
def bfcl_checker():
    """bfcl-eval's ast_checker, imported with its one unavailable import (model_config, which pulls
    in provider SDKs and is only used to rename dotted function names for some providers) stubbed."""
    name = "bfcl_eval.constants.model_config"
    saved = {k: v for k, v in sys.modules.items() if k == name or k.startswith("bfcl_eval.eval_checker.ast_eval")}
    stub = types.ModuleType(name)
    stub.MODEL_CONFIG_MAPPING = collections.defaultdict(lambda: types.SimpleNamespace(underscore_to_dot=False))
    sys.modules[name] = stub
    try:
        checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
        from bfcl_eval.constants.enums import Language
    except ModuleNotFoundError as e:
        pytest.skip(f"bfcl-eval's checker needs {e.name!r} beyond the stubbed module")
    yield lambda f, calls, a, cat: checker.ast_checker(
        f, [{c.name: c.arguments} for c in calls], a, Language.PYTHON, cat, "qdrift")["valid"]
    for k in [k for k in sys.modules if k == name or k.startswith("bfcl_eval.eval_checker.ast_eval")]:
        del sys.modules[k]
    sys.modules.update(saved)


def _variants(item, rng):
    """The possible answer itself, and mutations of it: case/spacing, off-by-one, str for int, int
    for float, a dropped argument, optional arrays given empty."""
    out = []
    for mode in range(7):
        calls = []
        for answer in item["answers"]:
            name, params = next(iter(answer.items()))
            args = {}
            for p, allowed in params.items():
                choices = [a for a in allowed if a != ""]
                if not choices:
                    continue
                v = rng.choice(choices)
                if mode == 6 and "" in allowed and isinstance(v, list):
                    v = []  # an optional array given empty
                if mode == 1 and isinstance(v, str):
                    v = v.upper() + " "
                elif mode == 2 and type(v) in (int, float):
                    v += 1
                elif mode == 3 and type(v) is int:
                    v = str(v)
                elif mode == 4 and type(v) is float and v == int(v):
                    v = int(v)
                args[p] = v
            if mode == 5 and args:
                args.pop(next(iter(args)))
            calls.append(ToolCall(name, args))
        out.append(calls)
    return out


@requires_bfcl
@pytest.mark.parametrize("category", ["simple", "multiple", "parallel", "parallel_multiple", "live_simple",
                                      "live_multiple"])
def test_agrees_with_bfcl_checker_on_real_items(bfcl_checker, category):
    from qdrift.bfcl.data import load_category

    rng = random.Random(category)
    verdicts = collections.Counter()
    for item in load_category(category, limit=80):
        for calls in _variants(item, rng):
            ours = ast_match(item["functions"], calls, item["answers"], category).valid
            assert ours == bfcl_checker(item["functions"], calls, item["answers"], category), (item["id"], calls)
            verdicts[ours] += 1
    assert verdicts[True] > 50 and verdicts[False] > 50  # both verdicts exercised


@requires_bfcl
@pytest.mark.parametrize("category, item_id, param", [
    ("simple", "simple_python_335", "deck"), ("simple", "simple_python_178", "additional_details"),
    ("parallel", "parallel_44", "amenities")])
def test_an_empty_optional_array_matches_as_in_bfcl(bfcl_checker, category, item_id, param):
    from qdrift.bfcl.data import load_category

    item = next(i for i in load_category(category) if i["id"] == item_id)
    calls = []
    for answer in item["answers"]:
        name, params = next(iter(answer.items()))
        args = {p: next(a for a in allowed if a != "") for p, allowed in params.items() if allowed != [""]}
        args[param] = []
        calls.append(ToolCall(name, args))
    assert bfcl_checker(item["functions"], calls, item["answers"], category)
    assert ast_match(item["functions"], calls, item["answers"], category).valid
