"""The pythonic format (Llama-3.2 / vLLM `pythonic`): parsed with `ast`, never evaluated."""

import ast

import pytest

from qdrift.envs.base import ToolCall
from qdrift.envs.parsers import get_parser

P = get_parser("pythonic")


def test_render_is_the_llama_pythonic_form_and_python_parses_it():
    text = P.render(ToolCall("lookup", {"key": "k17"}))
    assert text == '[lookup(key="k17")]'
    call = ast.parse(text, mode="eval").body.elts[0]  # an independent reading of the same text
    assert call.func.id == "lookup" and ast.literal_eval(call.keywords[0].value) == "k17"


def test_worked_line_before_the_call_is_content():
    turn = P.parse('k3=4 0 4 = 4\n[report(total=4)]')
    assert turn.calls == [ToolCall("report", {"total": 4})]
    assert turn.content == "k3=4 0 4 = 4" and turn.error is None and turn.json_valid


def test_several_calls_in_one_list():
    turn = P.parse('[a(x=1), b(y="z")]')
    assert turn.calls == [ToolCall("a", {"x": 1}), ToolCall("b", {"y": "z"})]


def test_plain_text_holds_no_call():
    turn = P.parse("the answer is k3 [not a call at line start]")
    assert turn.calls == [] and turn.error is None


@pytest.mark.parametrize("text, fragment", [
    ('[lookup(key="k1")', "never closed"),
    ('[lookup("k1")]', "keyword arguments only"),
    ('[lookup(**kw)]', "keyword arguments only"),
    ("[lookup(key=foo)]", "argument 'key' of lookup() is not a literal"),
    ("[lookup(key=__import__('os').system('true'))]", "is not a literal"),
    ("[os.system(cmd=1)]", "not a call to a tool name"),
    ("[1, 2]", "not a call to a tool name"),
    ("[]", "empty pythonic call list"),
    ("[f(x=1e999)]", "not finite"),
    ('[f(x=1)] trailing', "invalid pythonic call list"),
])
def test_malformed_calls_are_errors_not_exceptions(text, fragment):
    turn = P.parse(text)
    assert turn.calls == [] and not turn.json_valid and turn.leading_error
    assert fragment in turn.error


def test_a_bad_first_call_is_a_leading_error_even_if_a_later_one_parses():
    turn = P.parse('[f(1), g(x=2)]')
    assert turn.leading_error and turn.calls == [ToolCall("g", {"x": 2})]


def test_render_refuses_values_without_a_literal():
    with pytest.raises(ValueError, match="no literal form"):
        P.render(ToolCall("f", {"x": float("nan")}))


@pytest.mark.parametrize("constant", ["nan", "inf", "NaN", "Infinity"])
def test_nan_and_infinity_names_are_not_literals(constant):
    turn = P.parse(f"[f(x={constant})]")
    assert turn.calls == [] and "is not a literal" in turn.error
