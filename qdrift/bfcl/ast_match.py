"""BFCL's AST match for Python functions: is a model's call one of the possible answers?

Written here because bfcl-eval's own checker (`bfcl_eval.eval_checker.ast_eval.ast_checker`)
cannot be imported without its provider SDKs (it imports `constants.model_config`, which imports
anthropic, openai, ...). This follows its rules for Python (bfcl-eval 2026.3.23, `ast_checker`,
`simple_function_checker` and the checkers it calls), and tests/bfcl/test_ast_match.py compares the
two verdicts on real items, loading bfcl's checker with that one import stubbed out:

1. the function name is the expected one (function names are used as given; BFCL's renaming of
   `a.b` to `a_b` for some providers does not apply here);
2. every required parameter is present; every given parameter is both documented and listed in
   the possible answer;
3. each value has the documented type: exact Python type (bool is not int), except that an int is
   accepted for `float` and a value of the possible answer's type is accepted when the answer uses
   a different type (BFCL's "variable" case); arrays check their items' type one level deep;
4. each value is among the allowed values: strings compared after removing spaces and `,./-_*^`
   and lower-casing (and `'` -> `"`), lists element-wise with the same string rule, dicts key by
   key (a list of dicts in order), anything else by `==`;
5. a parameter of the possible answer that the call omits must be optional there (`""` allowed).

For several calls: `parallel` categories need as many calls as answers, matched in any order,
each answer to the first unused call that matches; `multiple` categories need exactly one call,
checked against the one answer with that answer's function doc.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from qdrift.envs.base import ToolCall

_PY_TYPES: dict[str, type] = {"string": str, "integer": int, "float": float, "boolean": bool, "array": list,
                              "tuple": list, "dict": dict, "any": str}
_NESTED = ("array", "tuple")


@dataclass(frozen=True)
class Match:
    valid: bool
    error: str = ""
    error_type: str = ""

    def __bool__(self) -> bool:
        return self.valid


_OK = Match(True)


def _standardize(text: str) -> str:
    return re.sub(r"[ \,\.\/\-\_\*\^]", "", text).lower().replace("'", '"')


def _answer_type(allowed: list) -> type | None:
    return next((type(a) for a in allowed if a != ""), None)


def _type_ok(value: Any, allowed: list, expected: type, nested: type | None) -> tuple[bool, bool]:
    """(whether the type is acceptable, whether the value is a 'variable': typed like the possible
    answer rather than the doc). Arrays check each item against each list-valued answer, one level."""
    answer_type = _answer_type(allowed)
    is_variable = answer_type is not None and answer_type is not expected
    if type(value) is expected:
        if nested is None:
            return True, is_variable
        for option in allowed:
            if type(option) is list and not all(_type_ok(v, option, nested, None)[0] for v in value):
                continue
            return True, is_variable
        return False, False
    if answer_type is not None and type(value) is answer_type:
        return True, True
    return False, False


def _std(value: Any) -> Any:
    return _standardize(value) if type(value) is str else value


def _check_dict(param: str, value: dict, allowed: list) -> Match:
    fail = Match(False, f"parameter {param!r}: {value!r} matches none of {allowed!r}", "value_error:dict")
    for option in allowed:
        if option == "":
            continue
        if any(k not in option or _std(v) not in [_std(a) for a in option[k]] for k, v in value.items()):
            continue
        if any(k not in value and "" not in v for k, v in option.items()):
            continue
        return _OK
    return fail


def _check_list_of_dicts(param: str, value: list, allowed: list) -> Match:
    for option in allowed:
        if option == "":  # the optional marker: BFCL takes it as a sequence of length 0, so [] matches
            option = []
        if type(option) is list and len(option) == len(value) and all(
                _check_dict(param, v, [o]).valid for v, o in zip(value, option, strict=True)):
            return _OK
    return Match(False, f"parameter {param!r}: {value!r} matches none of {allowed!r}", "value_error:list_dict")


def _check_value(param: str, value: Any, allowed: list, expected: type, nested: type | None) -> Match:
    if expected is dict:
        return _check_dict(param, value, allowed)
    if expected is list and nested is dict:
        return _check_list_of_dicts(param, value, allowed)
    if expected is str:
        ok = _standardize(value) in [_standardize(a) for a in allowed if type(a) is str]
        return _OK if ok else Match(False, f"parameter {param!r}: {value!r} is not one of {allowed!r}",
                                    "value_error:string")
    if expected is list:
        # BFCL iterates every answer as a sequence: the optional marker "" is then [], so [] matches it
        # (and a string answer is its characters, which BFCL's own list_checker compares the same way)
        options = [[_std(x) for x in a] for a in allowed if isinstance(a, (list, str))]
        ok = [_std(x) for x in value] in options
        return _OK if ok else Match(False, f"parameter {param!r}: {value!r} is not one of {allowed!r}",
                                    "value_error:list")
    return _OK if value in allowed else Match(False, f"parameter {param!r}: {value!r} is not one of {allowed!r}",
                                              "value_error:others")


def match_call(function: dict, call: ToolCall, answer: dict) -> Match:
    """Whether `call` matches `answer` ({name: {param: [allowed]}}) for the BFCL function doc `function`."""
    name, allowed_params = next(iter(answer.items()))
    if call.name != name:
        return Match(False, f"function {call.name!r}, expected {name!r}", "wrong_func_name")
    props = function["parameters"]["properties"]
    args = call.arguments
    for param in function["parameters"].get("required", []):
        if param not in args:
            return Match(False, f"missing required parameter {param!r}", "missing_required")
    for param, value in args.items():
        if param not in props or param not in allowed_params:
            return Match(False, f"unexpected parameter {param!r}", "unexpected_param")
        bfcl_type = props[param]["type"]
        if bfcl_type not in _PY_TYPES:
            raise ValueError(f"BFCL type {bfcl_type!r} of {name}.{param} is not a Python type BFCL checks; "
                             f"known: {', '.join(_PY_TYPES)}")
        expected = _PY_TYPES[bfcl_type]
        nested = _PY_TYPES[props[param]["items"]["type"]] if bfcl_type in _NESTED else None
        if bfcl_type == "float" and type(value) is int:
            value = float(value)
        type_ok, is_variable = _type_ok(value, allowed_params[param], expected, nested)
        if not type_ok:
            return Match(False, f"parameter {param!r}: expected {bfcl_type}, got {type(value).__name__} {value!r}",
                         "type_error")
        if is_variable:
            if value not in allowed_params[param]:
                return Match(False, f"parameter {param!r}: {value!r} is not one of {allowed_params[param]!r}",
                             "value_error:others")
            continue
        verdict = _check_value(param, value, allowed_params[param], expected, nested)
        if not verdict:
            return verdict
    for param, allowed in allowed_params.items():
        if param not in args and "" not in allowed:
            return Match(False, f"parameter {param!r} omitted but not optional", "missing_optional")
    return _OK


def _doc(functions: list[dict], name: str) -> dict:
    for f in functions:
        if f["name"] == name:
            return f
    raise ValueError(f"possible answer names {name!r}, which no function doc defines: "
                     f"{', '.join(f['name'] for f in functions)}")


def ast_match(functions: list[dict], calls: list[ToolCall], answers: list[dict], category: str) -> Match:
    """BFCL's verdict on a turn's `calls` against the possible `answers` of a `category`."""
    if len(calls) != len(answers):
        return Match(False, f"{len(calls)} call(s), expected {len(answers)}", "wrong_count")
    if "parallel" in category:
        used: set[int] = set()
        for i, answer in enumerate(answers):
            doc = _doc(functions, next(iter(answer)))
            last = Match(False, "no call", "cannot_find_match")
            for k, call in enumerate(calls):
                if k in used:
                    continue
                last = match_call(doc, call, answer)
                if last:
                    used.add(k)
                    break
            if not last:
                return Match(False, f"no call matches answer {i}: {last.error}", "cannot_find_match")
        return _OK
    return match_call(_doc(functions, next(iter(answers[0]))), calls[0], answers[0])
