"""Agent episodes over an endpoint: tool_calls in, scored steps out, failures as scored failed steps."""

import json
import math
import re
import threading

import pytest

from qdrift.backends.endpoint import Outcome
from qdrift.backends.endpoint_policy import (
    ONE_CALL_PER_STEP,
    EndpointPolicy,
    assistant_text,
    render_tool_call,
)
from qdrift.backends.openai_client import OpenAIEndpoint
from qdrift.envs.base import ToolCall
from qdrift.envs.parsers import HermesParser
from qdrift.envs.registry import make_environment
from qdrift.envs.runner import run_episodes


def completion(message, finish="tool_calls", usage=None, logprobs=None):
    choice = {"index": 0, "message": message, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": [{"token": "t", "logprob": lp} for lp in logprobs]}
    return {"choices": [choice], "usage": usage or {"prompt_tokens": 30, "completion_tokens": 9}}


class OracleEndpoint:
    """Answers each request with the environment's oracle call, as an OpenAI tool call."""

    name = "oracle"

    def __init__(self, envs, extra_calls=0):
        self.envs, self.extra_calls = envs, extra_calls
        self.bodies: dict[str, dict] = {}
        self.lock = threading.Lock()

    def complete(self, body, request_id):
        with self.lock:
            self.bodies[request_id] = json.loads(json.dumps(body))  # what would go over the wire
        row = int(re.match(r"r(\d+)-", request_id).group(1))
        call = self.envs[row].oracle()
        calls = [{"id": f"c{request_id}-{i}", "type": "function",
                  "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
                 for i in range(1 + self.extra_calls)]
        return Outcome(request_id, True, completion({"role": "assistant", "content": None, "tool_calls": calls},
                                                    logprobs=[-0.5, -0.25]), 200, None, 1, 0.01)


class DownEndpoint:
    name = "down"

    def __init__(self):
        self.sent = []

    def complete(self, body, request_id):
        self.sent.append(request_id)
        return Outcome(request_id, False, None, 503, "http_503", 4, 0.1, "attempts exhausted (4 of 4): answered 503")


def envs(n=3, horizon=3):
    return [make_environment("pointer_chase", horizon=horizon, seed=1_000_000 + i) for i in range(n)]


def test_oracle_endpoint_solves_every_episode():
    batch = envs()
    ep = OracleEndpoint(batch)
    episodes, steps = run_episodes(EndpointPolicy(ep, concurrency=2), batch)
    assert [e.success for e in episodes] == [True] * 3
    assert all(s.correct and s.json_valid and s.schema_valid for s in steps)
    assert len(steps) == 3 * 4  # 3 lookups and the answer per episode
    s = steps[0]
    assert (s.stop_reason, s.tokens_in, s.tokens_out, s.policy_error) == ("tool_calls", 30, 9, None)
    assert s.logprob == pytest.approx(-0.75)
    # the second request carries the endpoint's own assistant message and a tool answer to its call id
    second = ep.bodies["r0-s1000000-t1"]["messages"]
    assert second[-2]["tool_calls"][0]["id"] == "cr0-s1000000-t0-0"
    assert second[-1] == {"role": "tool", "tool_call_id": "cr0-s1000000-t0-0", "content": steps[0].observation}
    assert ep.bodies["r0-s1000000-t0"]["tools"] == batch[0].tools()


def test_every_call_of_a_turn_gets_an_answer_and_only_the_first_runs():
    batch = envs(1, 2)
    ep = OracleEndpoint(batch, extra_calls=1)
    episodes, _ = run_episodes(EndpointPolicy(ep), batch)
    assert episodes[0].success
    msgs = ep.bodies["r0-s1000000-t1"]["messages"]
    assert [m["role"] for m in msgs[-3:]] == ["assistant", "tool", "tool"]
    assert msgs[-1] == {"role": "tool", "tool_call_id": "cr0-s1000000-t0-1", "content": ONE_CALL_PER_STEP}


def test_failed_requests_are_scored_failed_steps_with_the_reason():
    batch = envs(2, 3)
    down = DownEndpoint()
    episodes, steps = run_episodes(EndpointPolicy(down), batch)
    assert [e.success for e in episodes] == [False, False]
    assert all(e.first_error_step == 0 for e in episodes)
    assert sorted(down.sent) == ["r0-s1000000-t0", "r1-s1000001-t0"]  # later turns are not sent
    assert {s.stop_reason for s in steps} == {"endpoint_error"} and not any(s.correct for s in steps)
    first = [s for s in steps if s.step == 0]
    assert all(s.policy_error.startswith("http_503: attempts exhausted") for s in first)
    later = [s for s in steps if s.step > 0]
    assert later and all(s.policy_error == "not sent: an earlier request of this episode failed (http_503)"
                         for s in later)
    assert all(math.isnan(s.logprob) for s in steps)


def test_rendered_calls_read_back_through_the_hermes_parser():
    parser = HermesParser()
    good = {"function": {"name": "lookup", "arguments": '{"key": "k1"}'}}
    assert render_tool_call(good) == parser.render(ToolCall("lookup", {"key": "k1"}))
    turn = parser.parse(assistant_text({"content": "Let me look.", "tool_calls": [good]}))
    assert turn.calls == [ToolCall("lookup", {"key": "k1"})] and turn.content == "Let me look." and turn.json_valid
    broken = parser.parse(render_tool_call({"function": {"name": "lookup", "arguments": '{"key": '}}))
    assert broken.calls == [] and "not JSON" in broken.error  # a malformed call stays malformed
    assert parser.parse(assistant_text({"content": "k9"})).calls == []


def test_policy_drives_the_http_client_end_to_end(fault_server):
    batch = envs(2, 1)
    fault_server.script("r1-s1000001-t0", "500")
    with OpenAIEndpoint(fault_server.base_url, "m", timeout_s=1, max_attempts=1, api_key_env=None) as ep:
        policy = EndpointPolicy(ep, max_tokens=32)
        episodes, steps = run_episodes(policy, batch)
    assert len(policy.outcomes) == len(fault_server.hits) == 3  # row 0: two turns; row 1: one failed
    # the server's canned answer is lookup(k1), parsed into a call the oracle scores
    row0 = [s for s in steps if s.episode == 0]
    assert json.loads(row0[0].call) == {"name": "lookup", "arguments": {"key": "k1"}}
    assert row0[0].stop_reason == "tool_calls" and row0[0].tokens_in == 12 and row0[0].policy_error is None
    row1 = [s for s in steps if s.episode == 1]
    assert row1[0].stop_reason == "endpoint_error" and row1[0].policy_error.startswith("http_500")
    assert policy.describe()["endpoint"]["model"] == "m"


def test_arguments_are_decoded_once_so_endpoint_and_local_text_score_alike():
    parser = HermesParser()
    # vLLM json.dumps-es whatever the model wrote as "arguments": here a string holding an object
    wire = {"function": {"name": "lookup", "arguments": json.dumps('{"key": "k1"}')}}
    local = '<tool_call>\n{"name": "lookup", "arguments": "{\\"key\\": \\"k1\\"}"}\n</tool_call>'
    for text in (render_tool_call(wire), local):
        turn = parser.parse(text)
        assert turn.calls == [ToolCall("lookup", {"key": "k1"})] and not turn.json_valid, text
    nulled = parser.parse(render_tool_call({"function": {"name": "lookup", "arguments": "null"}}))
    assert nulled.calls == [ToolCall("lookup", {})] and nulled.error is None
    raw = parser.parse(render_tool_call({"function": {"name": "lookup", "arguments": "key=k1"}}))
    assert raw.calls == [] and "not JSON" in raw.error


class ScriptedEndpoint:
    """Answers every request with the same reply."""

    name = "scripted"

    def __init__(self, reply):
        self.reply, self.bodies = reply, []

    def complete(self, body, request_id):
        self.bodies.append(json.loads(json.dumps(body)))
        return Outcome(request_id, True, self.reply, 200, None, 1, 0.01)


def test_a_reply_with_null_content_and_no_calls_is_sent_back_as_an_empty_string():
    ep = ScriptedEndpoint(completion({"role": "assistant", "content": None, "refusal": "no"}, finish="stop"))
    episodes, steps = run_episodes(EndpointPolicy(ep), envs(1, horizon=2))
    assert len(ep.bodies) == len(steps) >= 2 and not steps[0].json_valid
    sent = [m for m in ep.bodies[1]["messages"] if m["role"] == "assistant"]
    assert sent == [{"role": "assistant", "content": ""}]  # OpenAI answers 400 to a null content here


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": "lookup"}]},
    {"role": "assistant", "content": None, "tool_calls": ["lookup"]},
    "lookup",
])
def test_a_reply_of_the_wrong_shape_is_a_failed_step_not_a_crash(message):
    episodes, steps = run_episodes(EndpointPolicy(ScriptedEndpoint(completion(message))), envs(2, horizon=2))
    firsts = [s for s in steps if s.step == 0]
    assert len(firsts) == 2 and all(s.policy_error.startswith("bad_response: the reply is not a chat completion")
                                    for s in firsts)
    assert all(s.policy_error for s in steps) and [e.success for e in episodes] == [False, False]


def test_each_turn_of_an_episode_sends_its_own_seed_and_reruns_send_the_same():
    # A server seeds a fresh generator per request: one seed for every turn would replay one random
    # stream at each turn of the episode.
    def seeds(policy_seed, trials=None):
        batch = envs(n=2, horizon=4)
        ep = OracleEndpoint(batch)
        run_episodes(EndpointPolicy(ep, temperature=1.0, seed=policy_seed), batch, trials=trials)
        return {rid: body["seed"] for rid, body in ep.bodies.items()}

    first = seeds(0)
    per_row = {}
    for rid, seed in first.items():
        per_row.setdefault(rid.split("-")[0], []).append(seed)
        assert 0 <= seed < 2**31, "a 32-bit seed, which every server takes"
    assert all(len(set(s)) == len(s) == 5 for s in per_row.values()), per_row
    assert len(set(first.values())) == len(first), "no two requests of the batch share a seed"
    assert seeds(0) == first and seeds(1) != first
