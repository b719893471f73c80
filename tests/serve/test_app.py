"""The server against qdrift's own generation path (HFPolicy) on environment conversations."""

import json

import httpx
import pytest

from qdrift.backends.hf import HFPolicy
from qdrift.envs.base import ToolCall
from qdrift.envs.registry import TRAIN_SEEDS_BELOW, make_environment
from qdrift.serve import ServerThread, load_served
from qdrift.spec import QuantSpec

from .conftest import QUANT_SPEC

SEED = TRAIN_SEEDS_BELOW + 3


def episode(seed=SEED):
    env = make_environment("pointer_chase", horizon=2, seed=seed, split="eval")
    return env, env.reset(), env.tools()


def reference_policy(server, messages, tools):
    """HFPolicy (the episode runner's backend: BatchSession decoding), greedy, on the same model."""
    served = server.served
    policy = HFPolicy(served.model, served.tokenizer, served.prompt, max_new_tokens=64)
    policy.start([(list(messages), tools)], [SEED])
    return policy


def calls_of(body) -> list[ToolCall]:
    msg = body["choices"][0]["message"]
    return [ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in msg["tool_calls"] or []]


def sse_events(text: str) -> list[str]:
    return [line[len("data: "):] for line in text.split("\n") if line.startswith("data: ")]


def test_tool_calls_equal_hfpolicy_greedy_over_two_turns(server, client):
    env, messages, tools = episode()
    policy = reference_policy(server, messages, tools)
    parser = server.served.prompt.parser
    for _ in range(2):
        ref = policy.respond([0])[0]
        r = client.post("/chat/completions", json={"model": "organism", "messages": messages, "tools": tools,
                                                   "temperature": 0, "parallel_tool_calls": False, "logprobs": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert calls_of(body) == parser.parse(ref.text).calls and len(calls_of(body)) == 1
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert body["usage"] == {"prompt_tokens": len(server.served.tokenizer(
            server.served.prompt.render(server.served.tokenizer, messages, tools)).input_ids),
            "completion_tokens": ref.tokens_out, "total_tokens": body["usage"]["prompt_tokens"] + ref.tokens_out}
        assert sum(t["logprob"] for t in choice["logprobs"]["content"]) == pytest.approx(ref.logprob, abs=1e-4)
        # Send the turn back as a harness would (parsed calls, JSON-string arguments) plus the tool result.
        call = calls_of(body)[0]
        result = env.step(call, ref.text)
        messages = messages + [choice["message"], {"role": "tool", "tool_call_id": choice["message"]["tool_calls"][0]["id"],
                                                    "content": result.observation}]
        policy.extend(0, messages[:-2] + [{"role": "assistant", "content": ref.text},
                                          {"role": "tool", "name": call.name, "content": result.observation}], tools)


def test_first_turn_prompt_tokens_equal_hfpolicy_tokens_in(server, client):
    _, messages, tools = episode()
    ref = reference_policy(server, messages, tools).respond([0])[0]
    r = client.post("/chat/completions", json={"messages": messages, "tools": tools, "temperature": 0})
    assert r.json()["usage"]["prompt_tokens"] == ref.tokens_in


def test_default_turn_runs_to_the_end_token_with_the_same_call(server, client):
    _, messages, tools = episode()
    ref = reference_policy(server, messages, tools).respond([0])[0]
    body = client.post("/chat/completions", json={"messages": messages, "tools": tools, "temperature": 0,
                                                  "logprobs": True}).json()
    tokens = [t["token"] for t in body["choices"][0]["logprobs"]["content"]]
    assert calls_of(body) == server.served.prompt.parser.parse(ref.text).calls
    assert "".join(tokens) == ref.text + server.served.tokenizer.eos_token
    assert body["usage"]["completion_tokens"] == ref.tokens_out + 1


def test_stream_reassembles_the_same_message_and_ends_with_done(server, client):
    _, messages, tools = episode()
    req = {"messages": messages, "tools": tools, "temperature": 0}
    whole = client.post("/chat/completions", json=req).json()
    r = client.post("/chat/completions", json={**req, "stream": True, "stream_options": {"include_usage": True}})
    assert r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content, calls, finish = "", {}, None
    for c in chunks:
        for ch in c["choices"]:
            delta = ch["delta"]
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls", []):
                slot = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                slot["name"] += tc["function"].get("name", "")
                slot["arguments"] += tc["function"].get("arguments", "")
            finish = ch["finish_reason"] or finish
    want = whole["choices"][0]
    assert content == (want["message"]["content"] or "")
    assert [calls[i] for i in sorted(calls)] == [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in want["message"]["tool_calls"]]
    assert finish == want["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]


def test_stream_without_tools_sends_content_deltas_that_add_up(client):
    req = {"messages": [{"role": "user", "content": "Start key: k5."}], "temperature": 0, "max_tokens": 12}
    whole = client.post("/chat/completions", json=req).json()
    events = sse_events(client.post("/chat/completions", json={**req, "stream": True}).text)
    chunks = [json.loads(e) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks[1:] if c["choices"][0]["delta"].get("content")]
    assert len(deltas) > 1
    assert "".join(deltas) == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]


def test_stop_sequence_ends_the_turn_and_is_cut(client):
    req = {"messages": [{"role": "user", "content": "Start key: k5."}], "temperature": 0, "max_tokens": 12}
    text = client.post("/chat/completions", json=req).json()["choices"][0]["message"]["content"]
    stop = text[5:8]
    body = client.post("/chat/completions", json={**req, "stop": [stop]}).json()
    assert body["choices"][0]["message"]["content"] == text[: text.find(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_repeats_and_seeds_differ():
    # A random tiny model: the trained organism is so sure of its next call that samples agree.
    import httpx

    from qdrift.serve import ServerThread, load_served

    req = {"messages": [{"role": "user", "content": "Start key: k5."}], "temperature": 1.5, "max_tokens": 16}
    with ServerThread(load_served("tiny:llama", "baseline")) as server, httpx.Client(base_url=server.url) as c:
        texts = [c.post("/chat/completions", json={**req, "seed": s}).json()["choices"][0]["message"]["content"]
                 for s in (1, 1, 2, 3)]
    assert texts[0] == texts[1]
    assert len(set(texts[1:])) > 1


def test_quantized_spec_changes_fingerprint_and_header(server, quant_server):
    req = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    base = httpx.post(f"{server.url}/chat/completions", json=req, timeout=60)
    quant = httpx.post(f"{quant_server.url}/chat/completions", json=req, timeout=60)
    assert base.json()["system_fingerprint"].endswith("-baseline")
    assert quant.json()["system_fingerprint"] == f"qdrift-0.1.0-{QuantSpec.parse(QUANT_SPEC).hash}"
    assert base.headers["x-qdrift-spec"] == "baseline"
    assert quant.headers["x-qdrift-spec"] == str(QuantSpec.parse(QUANT_SPEC))


@pytest.mark.parametrize("body, names", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "role"),
    ({"messages": [{"role": "user", "content": "x"}], "best_of": 2}, "best_of"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 2}, "n=2"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]}, "parameters"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tool name"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "type 'object'"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "tool_call_id"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "nope"}]}, "nope"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]}]}, "arguments"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 10**6}, "context length"),
])
def test_bad_requests_get_400_naming_the_problem(client, body, names):
    r = client.post("/chat/completions", json=body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert names in err["message"]


def test_malformed_json_body_gets_400(client):
    r = client.post("/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert "JSON" in r.json()["error"]["message"]


def test_unknown_model_name_gets_404_naming_the_served_one(client):
    r = client.post("/chat/completions", json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404
    assert "'organism'" in r.json()["error"]["message"]


def test_models_lists_the_served_model(client):
    data = client.get("/models").json()["data"]
    assert [m["id"] for m in data] == ["organism"]


def test_server_binds_to_loopback_by_default(server):
    host, port = server.address
    assert host == "127.0.0.1" and port > 0


def test_random_tiny_model_gives_well_formed_responses_not_500():
    # tiny:llama has a 512-token context and a byte tokenizer: a short conversation with one tool.
    messages = [{"role": "user", "content": "Start key: k5. Call lookup(key) on it."}]
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
    with ServerThread(load_served("tiny:llama", "baseline")) as s:
        for extra in ({"temperature": 0}, {"temperature": 1.0, "seed": 3}, {"stream": True, "temperature": 0}):
            r = httpx.post(f"{s.url}/chat/completions", timeout=60,
                           json={"messages": messages, "tools": tools, "max_tokens": 16, **extra})
            assert r.status_code == 200, r.text
            if extra.get("stream"):
                assert sse_events(r.text)[-1] == "[DONE]"
                continue
            choice = r.json()["choices"][0]
            assert choice["finish_reason"] in ("length", "stop")
            assert choice["message"]["tool_calls"] is None
            assert isinstance(choice["message"]["content"], str)


def test_usage_is_null_on_every_chunk_but_the_last_when_asked_for(client):
    req = {"messages": [{"role": "user", "content": "Start key: k5."}], "temperature": 0, "max_tokens": 6,
           "stream": True, "stream_options": {"include_usage": True}}
    chunks = [json.loads(e) for e in sse_events(client.post("/chat/completions", json=req).text)[:-1]]
    assert all("usage" in c and c["usage"] is None for c in chunks[:-1])
    assert chunks[-1]["usage"]["completion_tokens"] >= 1


def test_a_seed_torch_cannot_take_is_a_400_naming_it(client):
    req = {"messages": [{"role": "user", "content": "hi"}], "temperature": 1.0, "seed": 2**70}
    r = client.post("/chat/completions", json=req)
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed"


def test_a_stream_nobody_reads_does_not_hold_the_model(server):
    # The stream's first chunk is read, then the client stops reading. Decoding goes on without
    # it, so the model is free again and a plain request is answered.
    req = {"messages": [{"role": "user", "content": "Start key: k5."}], "temperature": 0, "max_tokens": 40,
           "stream": True}
    with httpx.Client(base_url=server.url, timeout=20) as slow, httpx.Client(base_url=server.url, timeout=20) as fast:
        with slow.stream("POST", "/chat/completions", json=req) as r:
            next(r.iter_lines())
            answer = fast.post("/chat/completions", json={**req, "stream": False, "max_tokens": 4})
            assert answer.status_code == 200 and answer.json()["choices"][0]["finish_reason"] == "length"


def test_logprob_bytes_are_the_tokens_own_bytes_or_null():
    from qdrift.serve.app import _token_bytes
    from qdrift.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    ids = tok("é", add_special_tokens=False).input_ids  # two byte tokens: 0xC3 0xA9
    parts = [_token_bytes(tok, i, tok.decode([i])) for i in ids]
    assert parts == [[0xC3], [0xA9]] and bytes(sum(parts, [])).decode() == "é"
    assert _token_bytes(tok, ids[0], "a") == [97]

    class Words:  # a vocabulary of whole words: a token decoding to U+FFFD has no known bytes
        def convert_ids_to_tokens(self, tid):
            return "<unk>"

    assert _token_bytes(Words(), 3, "\ufffd") is None


def test_episodes_through_the_server_write_what_local_episodes_write_where_calls_follow_a_content_line(server):
    # dict_sum: the organism writes its working on a line, then the call. The server returns that line
    # as the content and the call as tool_calls; sent back, the template must re-render the very text
    # the model wrote, newline included, or the endpoint's episodes drift from the local ones.
    from qdrift.backends.endpoint_policy import EndpointPolicy
    from qdrift.backends.openai_client import OpenAIEndpoint
    from qdrift.envs.runner import run_episodes

    def batch():
        return [make_environment("dict_sum", horizon=3, seed=SEED + i, vmax=1, keyspace=1000) for i in range(2)]

    served = server.served
    _, local = run_episodes(HFPolicy(served.model, served.tokenizer, served.prompt, max_new_tokens=64), batch())
    assert all("\n<tool_call>" in s.raw and not s.raw.startswith("<tool_call>") for s in local)
    endpoint = OpenAIEndpoint(server.url, "organism", api_key_env=None, timeout_s=60)
    _, remote = run_episodes(EndpointPolicy(endpoint, max_tokens=64, logprobs=True), batch())
    assert [s.raw for s in remote] == [s.raw for s in local]
    assert [s.logprob for s in remote] == pytest.approx([s.logprob for s in local], abs=1e-4)
