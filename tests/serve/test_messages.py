"""OpenAI-shaped history -> ToolPrompt messages, in native and prompted mode."""

import pytest

from qdrift.envs.base import ToolCall
from qdrift.envs.prompting import tool_prompt_for
from qdrift.serve.messages import MessageError, prompt_messages
from qdrift.serve.protocol import ChatCompletionRequest
from qdrift.tiny import tiny_tokenizer

HISTORY = {"messages": [
    {"role": "developer", "content": "Be terse."},
    {"role": "user", "content": [{"type": "text", "text": "Start "}, {"type": "text", "text": "at k5."}]},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "abc123XYZ", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\": \"k5\"}"}}]},
    {"role": "tool", "tool_call_id": "abc123XYZ", "content": "k9"},
]}


def test_prompted_mode_writes_the_call_back_into_the_assistant_text():
    prompt = tool_prompt_for(tiny_tokenizer(), mode="prompted", parser="hermes")
    msgs = prompt_messages(ChatCompletionRequest(**HISTORY), prompt)
    assert msgs[0] == {"role": "system", "content": "Be terse."}
    assert msgs[1]["content"] == "Start at k5."
    assert msgs[2]["content"] == prompt.parser.render(ToolCall("lookup", {"key": "k5"}))
    assert msgs[3] == {"role": "tool", "content": "k9", "name": "lookup", "tool_call_id": "abc123XYZ"}
    rendered = prompt.render(tiny_tokenizer(), msgs, [])
    assert '<tool_call>\n{"name": "lookup", "arguments": {"key": "k5"}}\n</tool_call>' in rendered


def test_native_mode_keeps_calls_as_tool_calls_with_decoded_arguments():
    prompt = tool_prompt_for(tiny_tokenizer(), mode="native")
    msgs = prompt_messages(ChatCompletionRequest(**HISTORY), prompt)
    assert msgs[2]["content"] == ""
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "lookup", "arguments": {"key": "k5"}}


def test_arguments_that_are_not_a_json_object_are_rejected_with_their_place():
    bad = {"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "[1, 2]"}}]}]}
    with pytest.raises(MessageError, match=r"messages\[0\].tool_calls\[0\].function.arguments must encode a JSON object"):
        prompt_messages(ChatCompletionRequest(**bad), tool_prompt_for(tiny_tokenizer()))
