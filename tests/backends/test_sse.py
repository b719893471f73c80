"""Stream reassembly: content and interleaved tool-call deltas merge into one chat completion."""

import json

import pytest

from qdrift.backends.sse import StreamError, assemble_stream, sse_data


def lines(*chunks, done=True):
    out = []
    for c in chunks:
        out += [f"data: {json.dumps(c)}", ""]
    return out + (["data: [DONE]", ""] if done else [])


def delta(**d):
    return {"choices": [{"index": 0, "delta": d}]}


def test_interleaved_tool_calls_merge_by_index():
    stream = lines(
        {"id": "x", "model": "m", **delta(role="assistant")},
        delta(tool_calls=[{"index": 0, "id": "a", "type": "function", "function": {"name": "look", "arguments": ""}}]),
        delta(tool_calls=[{"index": 1, "id": "b", "type": "function", "function": {"name": "answer", "arguments": "{"}}]),
        delta(tool_calls=[{"index": 0, "function": {"name": "up", "arguments": '{"key": "k1"}'}}]),
        delta(tool_calls=[{"index": 1, "function": {"arguments": '"value": "k2"}'}}]),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls",
                      "logprobs": {"content": [{"token": "a", "logprob": -1.0}]}}]},
    )
    resp = assemble_stream(sse_data(stream))
    msg = resp["choices"][0]["message"]
    assert resp["id"] == "x" and resp["model"] == "m" and msg["content"] is None
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"]] == [
        ("a", "lookup", {"key": "k1"}), ("b", "answer", {"value": "k2"})]
    assert resp["choices"][0]["finish_reason"] == "tool_calls"
    assert resp["choices"][0]["logprobs"] == {"content": [{"token": "a", "logprob": -1.0}]}


def test_comments_multiline_data_and_content():
    stream = [": keep-alive", "", "event: message", 'data: {"choices": [{"index": 0,', 'data: "delta": {"content": "Hel"}}]}',
              "", f"data: {json.dumps(delta(content='lo'))}", "", "data: [DONE]"]
    assert assemble_stream(sse_data(stream))["choices"][0]["message"]["content"] == "Hello"


@pytest.mark.parametrize("stream, reason", [
    (lines(delta(content="a"), done=False), "truncated_stream"),
    (["data: {not json", ""], "malformed_json"),
    (["data: [1]", ""], "malformed_json"),
    (lines({"error": {"message": "overloaded"}}), "stream_error"),
])
def test_broken_streams_fail_with_their_reason(stream, reason):
    with pytest.raises(StreamError) as exc:
        assemble_stream(sse_data(stream))
    assert exc.value.reason == reason


def test_parallel_calls_that_all_say_index_0_stay_separate_calls():
    # SGLang, Ollama and NVIDIA Dynamo number every parallel call 0; each brings its own id.
    stream = lines(
        delta(tool_calls=[{"index": 0, "id": "A", "type": "function", "function": {"name": "add", "arguments": ""}}]),
        delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a": 3}'}}]),
        delta(tool_calls=[{"index": 0, "id": "B", "type": "function",
                           "function": {"name": "multiply", "arguments": '{"a": 11}'}}]),
        delta(tool_calls=[{"index": 0, "function": {"name": "sub", "arguments": '{"a": 1}'}}]),  # no id at all
    )
    calls = assemble_stream(sse_data(stream))["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("A", "add", {"a": 3}), ("B", "multiply", {"a": 11}), (None, "sub", {"a": 1})]


def test_a_tool_call_piece_of_the_wrong_shape_is_a_stream_error_not_a_crash():
    for piece in ("lookup", {"index": "0", "function": {"name": "f"}}):
        with pytest.raises(StreamError) as e:
            assemble_stream(sse_data(lines(delta(tool_calls=[piece]))))
        assert e.value.reason == "malformed_json"
