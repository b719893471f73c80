"""Tool-call parsers on recorded outputs of the formats' model families.

The strings are written from the formats' chat templates / published docs: Qwen2.5-Instruct
(hermes: `<tool_call>\\n{json}\\n</tool_call>`), Llama-3.1/3.2-Instruct (JSON tool calling,
`{"name": ..., "parameters": ...}`, `<|python_tag|>` with builtin tools), Mistral-7B-Instruct-v0.3
(`[TOOL_CALLS] [{...}]`) and Mistral-Small-3.2 (`[TOOL_CALLS]name[ARGS]{...}`).
"""

from __future__ import annotations

import pytest

from qdrift.envs.base import ToolCall
from qdrift.envs.parsers import (
    HermesParser,
    Llama3JsonParser,
    MistralParser,
    ParsedTurn,
    ToolCallParser,
    get_parser,
    parser_for,
)

W = ToolCall("get_current_temperature", {"location": "San Francisco, CA, USA", "unit": "celsius"})
W2 = ToolCall("get_current_wind_speed", {"location": "San Francisco, CA, USA"})

CALLS = [
    W,
    ToolCall("follow", {"node": 17}),
    ToolCall("noop", {}),
    ToolCall("nested", {"a": [1, {"b": None}], "s": "quote \" and } ] and </tool_call>", "u": "héllo ☃"}),
    ToolCall("f", {"x": 1.5, "flag": True, "items": [], "obj": {}}),
]
ALL = [get_parser("hermes"), get_parser("llama3_json"), get_parser("mistral"), MistralParser(style="args"),
       get_parser("pythonic")]


def ok(turn: ParsedTurn, calls: list[ToolCall], content: str = "") -> None:
    assert turn.error is None, turn.error
    assert turn.json_valid
    assert turn.calls == calls
    assert turn.content == content


# ------------------------------------------------------------------------------- protocol, registry


@pytest.mark.parametrize("parser", ALL, ids=lambda p: f"{p.name}-{getattr(p, 'style', '')}")
@pytest.mark.parametrize("call", CALLS, ids=lambda c: c.name)
def test_round_trip(parser, call):
    text = parser.render(call)
    assert text.startswith(parser.opening)
    assert parser.parse(text).calls == [call]
    ok(parser.parse(text), [call])


@pytest.mark.parametrize("parser", ALL, ids=lambda p: f"{p.name}-{getattr(p, 'style', '')}")
def test_protocol_members(parser):
    assert isinstance(parser, ToolCallParser)
    assert isinstance(parser.stop_strings, tuple)
    # pythonic alone ends at the end-of-turn token: ")]" may also occur inside an argument
    assert bool(parser.stop_strings) == (parser.name != "pythonic")
    assert parser.opening


def test_get_parser_unknown_suggests():
    with pytest.raises(ValueError, match=r"Unknown tool-call format 'hermess'\. Did you mean 'hermes'\? Available: hermes, llama3_json, mistral, pythonic"):
        get_parser("hermess")
    with pytest.raises(ValueError, match="Available: hermes"):
        get_parser("xml")


def test_parser_for_names():
    assert parser_for("hermes").name == "hermes"
    assert parser_for("Qwen/Qwen2.5-7B-Instruct").name == "hermes"
    assert parser_for("meta-llama/Llama-3.1-8B-Instruct").name == "llama3_json"
    assert parser_for("mistralai/Mistral-7B-Instruct-v0.3").name == "mistral"
    with pytest.raises(ValueError, match="HuggingFaceTB/SmolLM2-135M-Instruct.*parser="):
        parser_for("HuggingFaceTB/SmolLM2-135M-Instruct")


class _Tok:
    def __init__(self, template, name="some/model"):
        self.chat_template = template
        self.name_or_path = name


def test_parser_for_templates():
    assert isinstance(parser_for(_Tok("{{ '<tool_call>\\n' }}{% for t in tools %}{% endfor %}")), HermesParser)
    assert isinstance(parser_for(_Tok("{{- '<|python_tag|>' + x }}")), Llama3JsonParser)
    assert isinstance(parser_for(_Tok("<|start_header_id|>ipython<|end_header_id|>")), Llama3JsonParser)
    m = parser_for(_Tok("{{- '[TOOL_CALLS] [' }}"))
    assert isinstance(m, MistralParser) and m.style == "list"
    assert parser_for(_Tok("{{- '[TOOL_CALLS]' + name + '[ARGS]' }}")).style == "args"
    chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    with pytest.raises(ValueError, match=r"'HuggingFaceTB/SmolLM2-135M-Instruct'.*pass parser= explicitly"):
        parser_for(_Tok(chatml, "HuggingFaceTB/SmolLM2-135M-Instruct"))
    with pytest.raises(ValueError, match="parser="):
        parser_for(_Tok(None))


# ------------------------------------------------------------------------------------------ hermes

H = HermesParser()
Q_ONE = '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA", "unit": "celsius"}}\n</tool_call>'
Q_TWO = (
    '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA", "unit": "celsius"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_current_wind_speed", "arguments": {"location": "San Francisco, CA, USA"}}\n</tool_call>'
)


def test_hermes_qwen_single_and_multi():
    ok(H.parse(Q_ONE), [W])
    assert H.render(W) == Q_ONE  # the canonical Qwen2.5 rendering
    ok(H.parse(Q_TWO), [W, W2])


def test_hermes_whitespace_variants():
    compact = '<tool_call>{"name":"get_current_temperature","arguments":{"location":"San Francisco, CA, USA","unit":"celsius"}}</tool_call>'
    ok(H.parse(compact), [W])
    spaced = '\n\n  <tool_call>\n\n  {"name": "get_current_temperature",\n   "arguments": {"location": "San Francisco, CA, USA",\n "unit": "celsius"}}  \n\n</tool_call>\n\n'
    ok(H.parse(spaced), [W])
    crlf = Q_ONE.replace("\n", "\r\n")
    ok(H.parse(crlf), [W])


def test_hermes_text_around_calls():
    text = "I'll check the temperature first.\n" + Q_ONE + "\nThen I will report back."
    ok(H.parse(text), [W], "I'll check the temperature first.\nThen I will report back.")
    ok(H.parse("The temperature is 22 C."), [], "The temperature is 22 C.")
    ok(H.parse(""), [], "")


def test_hermes_qwen3_thinking_before_call():
    text = "<think>\nI need the weather.\n</think>\n\n" + Q_ONE
    turn = H.parse(text)
    assert turn.calls == [W] and turn.error is None
    assert "<think>" in turn.content


def test_hermes_unterminated_complete_json_is_accepted():
    # generation stopped on the "</tool_call>" stop string, which was not returned
    ok(H.parse(Q_ONE[: -len("</tool_call>")]), [W])
    ok(H.parse(Q_ONE[: -len("\n</tool_call>")]), [W])
    # cut inside the closing tag (max_new_tokens, where the tag is several tokens)
    for cut in ("_call>", "call>", "l>", ">"):
        ok(H.parse(Q_ONE[: -len(cut)]), [W])
    turn = H.parse(Q_ONE[: -len("</tool_call>")] + "</toolbox>")  # not the tag: extra data, as before
    assert turn.calls == [] and "extra data" in turn.error


def test_hermes_truncated():
    turn = H.parse('<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Fr')
    assert turn.calls == [] and not turn.json_valid
    assert turn.error.startswith("unterminated <tool_call> (invalid JSON in <tool_call>:")
    turn = H.parse(Q_ONE + "\n<tool_call>\n{\"name\": \"get_cur")
    assert turn.calls == [W] and "unterminated" in turn.error and not turn.json_valid
    turn = H.parse("<tool_call>")
    assert turn.calls == [] and "empty" in turn.error


def test_hermes_invalid_json():
    turn = H.parse('<tool_call>\n{"name": "f" "arguments": {}}\n</tool_call>')
    assert turn.calls == [] and not turn.json_valid
    assert turn.error == "invalid JSON in <tool_call>: Expecting ',' delimiter at char 13"
    # python-style dict (single quotes): never eval'd
    turn = H.parse("<tool_call>\n{'name': 'f', 'arguments': {'x': __import__('os').getcwd()}}\n</tool_call>")
    assert turn.calls == [] and turn.error.startswith("invalid JSON in <tool_call>")
    turn = H.parse('<tool_call>\n{"name": "f", "arguments": {}} trailing\n</tool_call>')
    assert turn.calls == [] and "extra data" in turn.error
    # one bad region, one good: the good call is kept, the error reported
    turn = H.parse('<tool_call>\n{"name": "f", "arguments": {]\n</tool_call>\n' + Q_ONE)
    assert turn.calls == [W] and turn.error is not None and not turn.json_valid


@pytest.mark.parametrize("parser", [p for p in ALL if p.name != "pythonic"],  # JSON formats (pythonic: its own test)
                         ids=lambda p: f"{p.name}-{getattr(p, 'style', '')}")
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(parser, constant):
    # Python's json reads these; RFC 8259 has none of them, so a call holding one is invalid JSON.
    text = parser.render(ToolCall("f", {"x": 1.5})).replace("1.5", constant)
    assert constant in text
    turn = parser.parse(text)
    assert turn.calls == [] and not turn.json_valid
    assert f"{constant} is not JSON" in turn.error


def test_nan_inside_string_encoded_arguments_is_not_json():
    turn = H.parse('<tool_call>\n{"name": "f", "arguments": "{\\"x\\": NaN}"}\n</tool_call>')
    assert turn.calls == [] and not turn.json_valid and "NaN is not JSON" in turn.error


def test_hermes_arguments_as_json_string_decoded_once():
    text = '<tool_call>\n{"name": "get_current_temperature", "arguments": "{\\"location\\": \\"San Francisco, CA, USA\\", \\"unit\\": \\"celsius\\"}"}\n</tool_call>'
    turn = H.parse(text)
    assert turn.calls == [W] and turn.error is None
    assert not turn.json_valid  # accepted leniently, recorded as not strictly valid
    # a string that holds a string holding an object is decoded once only: rejected
    twice = '<tool_call>\n{"name": "f", "arguments": "\\"{}\\""}\n</tool_call>'
    turn = H.parse(twice)
    assert turn.calls == [] and "not an object" in turn.error
    turn = H.parse('<tool_call>\n{"name": "f", "arguments": "location=SF"}\n</tool_call>')
    assert turn.calls == [] and "not JSON" in turn.error


@pytest.mark.parametrize(
    "body, fragment",
    [
        ('{"arguments": {"x": 1}}', 'no "name"'),
        ('{"name": 3, "arguments": {}}', '"name" that is not'),
        ('{"name": "", "arguments": {}}', '"name" that is not'),
        ('{"name": "f", "arguments": [1, 2]}', "list, not an object"),
        ('{"name": "f", "arguments": 7}', "int, not an object"),
        ('[{"name": "f", "arguments": {}}]', "list, not an object"),
        ('"f"', "str, not an object"),
    ],
)
def test_hermes_bad_shapes(body, fragment):
    turn = H.parse(f"<tool_call>\n{body}\n</tool_call>")
    assert turn.calls == [] and not turn.json_valid
    assert fragment in turn.error


def test_hermes_missing_arguments_is_empty_but_flagged():
    turn = H.parse('<tool_call>\n{"name": "list_files"}\n</tool_call>')
    assert turn.calls == [ToolCall("list_files", {})] and turn.error is None and not turn.json_valid


def test_hermes_arguments_under_another_key_are_an_error_not_dropped():
    turn = H.parse('<tool_call>\n{"name": "f", "parameters": {"a": 1}}\n</tool_call>')
    assert turn.calls == [] and not turn.json_valid and turn.leading_error
    assert turn.error == '<tool_call> has no "arguments" (its other keys: "parameters")'


def test_hermes_tool_call_mentioned_in_thinking_or_prose_does_not_swallow_the_call():
    thought = "<think>\nThe user wants the weather, so I will emit a <tool_call> for it.\n</think>\n\n"
    turn = H.parse(thought + Q_ONE)
    assert turn.calls == [W] and turn.error is None and not turn.leading_error
    # outside a thinking block an opened, never-closed <tool_call> is a malformed first call
    turn = H.parse("I will emit a <tool_call> now.\n" + Q_ONE)
    assert turn.calls == [W] and turn.leading_error
    assert turn.error.startswith("unterminated <tool_call> (invalid JSON")


def test_leading_error_marks_a_malformed_first_call_only():
    bad = '<tool_call>\n{"name": "f", "arguments": {]\n</tool_call>\n'
    assert H.parse(bad + Q_ONE).leading_error
    later = H.parse(Q_ONE + "\n" + bad)
    assert later.calls == [W] and later.error is not None and not later.leading_error
    assert not H.parse(Q_ONE).leading_error and not H.parse("no call here").leading_error


# ------------------------------------------------------------------------------------- llama3_json

L = Llama3JsonParser()
# Llama-3.1-8B-Instruct, custom (JSON) tool calling, as its template writes an assistant tool call
L_ONE = '{"name": "get_current_temperature", "parameters": {"location": "San Francisco, CA, USA", "unit": "celsius"}}'


def test_llama_plain_and_python_tag():
    ok(L.parse(L_ONE), [W])
    assert L.render(W) == L_ONE
    ok(L.parse("<|python_tag|>" + L_ONE), [W])
    ok(L.parse("<|python_tag|>" + L_ONE + "<|eom_id|>"), [W], "<|eom_id|>")
    ok(L.parse("\n\n  " + L_ONE + "  \n"), [W])


def test_llama_arguments_key_and_compact():
    ok(L.parse('{"name":"get_current_temperature","arguments":{"location":"San Francisco, CA, USA","unit":"celsius"}}'), [W])
    ok(L.parse('{\n  "name": "follow",\n  "parameters": {\n    "node": 17\n  }\n}'), [ToolCall("follow", {"node": 17})])


def test_llama_multi_call_variants():
    two = L_ONE + '; {"name": "get_current_wind_speed", "parameters": {"location": "San Francisco, CA, USA"}}'
    ok(L.parse(two), [W, W2])
    ok(L.parse(two.replace("; ", "\n")), [W, W2])
    ok(L.parse("[" + two.replace(";", ",") + "]"), [W, W2])


def test_llama_text_around():
    # Llama-3.2-3B often announces the call before writing it
    ok(L.parse("Let me look that up.\n\n" + L_ONE), [W], "Let me look that up.")
    ok(L.parse(L_ONE + "\n\nThis will give the current temperature."), [W], "This will give the current temperature.")
    ok(L.parse("The current temperature in San Francisco is 22 degrees Celsius."), [],
       "The current temperature in San Francisco is 22 degrees Celsius.")
    ok(L.parse("Use {braces} freely in an answer."), [], "Use {braces} freely in an answer.")


def test_llama_truncated_and_invalid():
    turn = L.parse(L_ONE[:60])
    assert turn.calls == [] and not turn.json_valid and turn.error.startswith("invalid JSON in tool call:")
    turn = L.parse('{"name": "f", "parameters": {"x": 1,}}')
    assert turn.calls == [] and "invalid JSON" in turn.error
    turn = L.parse('{"na')
    assert turn.calls == [] and turn.error is not None
    turn = L.parse("<|python_tag|>brave_search.call(query=\"weather\")")
    assert turn.calls == [] and turn.error.startswith("invalid JSON in tool call after <|python_tag|>")
    turn = L.parse("<|python_tag|>")
    assert turn.calls == [] and "empty" in turn.error
    turn = L.parse('{"parameters": {"x": 1}}')
    assert turn.calls == [] and 'no "name"' in turn.error


def test_llama_arguments_as_string_and_bad_types():
    turn = L.parse('{"name": "follow", "parameters": "{\\"node\\": 17}"}')
    assert turn.calls == [ToolCall("follow", {"node": 17})] and turn.error is None and not turn.json_valid
    turn = L.parse('{"name": "follow", "parameters": [17]}')
    assert turn.calls == [] and "not an object" in turn.error


# ----------------------------------------------------------------------------------------- mistral

M = MistralParser()
MA = MistralParser(style="args")
# Mistral-7B-Instruct-v0.3 (decoded with special tokens kept; "[TOOL_CALLS]" is a control token,
# the sentencepiece "▁[" gives the space)
M_ONE = '[TOOL_CALLS] [{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA", "unit": "celsius"}}]'


def test_mistral_v03_list():
    ok(M.parse(M_ONE), [W])
    assert M.render(W) == M_ONE
    ok(M.parse(M_ONE + "</s>"), [W])
    ok(M.parse(M_ONE.replace("[TOOL_CALLS] [", "[TOOL_CALLS][")), [W])
    two = ('[TOOL_CALLS] [{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA", "unit": "celsius"}, "id": "9Ae3bDc2F"}, '
           '{"name": "get_current_wind_speed", "arguments": {"location": "San Francisco, CA, USA"}, "id": "aBc123XyZ"}]')
    ok(M.parse(two), [W, W2])
    ok(M.parse(' [TOOL_CALLS]\n[\n  {"name": "follow", "arguments": {"node": 17}}\n]\n'), [ToolCall("follow", {"node": 17})])


def test_mistral_small_args_form():
    one = '[TOOL_CALLS]get_current_temperature[ARGS]{"location": "San Francisco, CA, USA", "unit": "celsius"}'
    ok(MA.parse(one), [W])
    ok(M.parse(one), [W])  # both styles parse both forms
    assert MA.render(W) == one
    two = one + '[TOOL_CALLS]get_current_wind_speed[ARGS]{"location": "San Francisco, CA, USA"}</s>'
    ok(M.parse(two), [W, W2])
    with_id = '[TOOL_CALLS]get_current_temperature[CALL_ID]a1b2c3d4e[ARGS]{"location": "San Francisco, CA, USA", "unit": "celsius"}'
    ok(M.parse(with_id), [W])


def test_mistral_text_around():
    ok(M.parse("Sure, let me check.\n" + M_ONE + "\nDone."), [W], "Sure, let me check.\nDone.")
    ok(M.parse("It is 22 degrees in San Francisco."), [], "It is 22 degrees in San Francisco.")


def test_mistral_truncated_invalid_bad():
    turn = M.parse(M_ONE[:70])
    assert turn.calls == [] and not turn.json_valid and turn.error.startswith("invalid JSON in [TOOL_CALLS]")
    turn = M.parse('[TOOL_CALLS]get_current_temperature[ARGS]{"location": "San')
    assert turn.calls == [] and "invalid JSON in [ARGS] of 'get_current_temperature'" in turn.error
    turn = M.parse("[TOOL_CALLS]get_current_temperature")
    assert turn.calls == [] and turn.error is not None
    turn = M.parse('[TOOL_CALLS] [{"name": "f", "arguments": "{\\"x\\": 1}"}]')
    assert turn.calls == [ToolCall("f", {"x": 1})] and turn.error is None and not turn.json_valid
    turn = M.parse('[TOOL_CALLS] [{"arguments": {}}]')
    assert turn.calls == [] and 'no "name"' in turn.error
    turn = M.parse('[TOOL_CALLS]f[ARGS][1]')
    assert turn.calls == [] and "not an object" in turn.error
    turn = M.parse("[TOOL_CALLS] []")
    assert turn.calls == [] and "empty" in turn.error
    turn = M.parse('[TOOL_CALLS][ARGS]{"x": 1}')
    assert turn.calls == [] and "no name" in turn.error


# ----------------------------------------------------------------------------------- never raises

NASTY = [
    "", " ", "{", "}", "[", "<tool_call>", "</tool_call>", "<tool_call></tool_call>" * 3,
    "[TOOL_CALLS]", "[TOOL_CALLS][ARGS]", "[TOOL_CALLS][ARGS][ARGS]{", "<|python_tag|>{",
    "[" * 100000, '{"name": ' + "[" * 100000, "<tool_call>" + "{" * 50000, "\x00\udcff",
    '{"name": "f", "parameters": NaN}', '<tool_call>{"name": "f", "arguments": {"x": Infinity}}</tool_call>',
    '{"name": "f", "parameters": {}}' * 200, "[TOOL_CALLS]" * 100,
]


@pytest.mark.parametrize("parser", ALL, ids=lambda p: f"{p.name}-{getattr(p, 'style', '')}")
def test_never_raises(parser):
    for text in NASTY:
        turn = parser.parse(text)
        assert isinstance(turn, ParsedTurn)
        assert isinstance(turn.calls, list) and isinstance(turn.content, str)
    assert parser.parse(None).error is not None  # type: ignore[arg-type]


def test_llama_call_objects_in_any_key_order_and_type_first():
    user = {"user": {"name": "Bob", "age": 3}}
    set_user = ToolCall("set_user", user)
    typed = '{"type": "function", "name": "set_user", "parameters": {"user": {"name": "Bob", "age": 3}}}'
    ok(L.parse(typed), [set_user])
    ok(L.parse("<|python_tag|>" + typed), [set_user])
    ok(L.parse('{"parameters": {"user": {"name": "Bob", "age": 3}}, "name": "set_user"}'), [set_user])
    ok(L.parse("Setting it. " + typed), [set_user], "Setting it.")  # not the "name" inside the arguments
    ok(L.parse('{"name": "a", "parameters": {}}; {"type": "function", "name": "b", "parameters": {}}'),
       [ToolCall("a", {}), ToolCall("b", {})])
    ok(L.parse("[1, 2] are the values"), [], "[1, 2] are the values")  # a list of numbers is an answer
