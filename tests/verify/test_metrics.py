import math

from qdrift.backends.endpoint import Outcome
from qdrift.verify.metrics import run_summary, score_response, score_run, trigger_counts
from qdrift.verify.requests import VerifyRequest
from tests.verify.fakes import text_response, tool_response

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"],
    "additionalProperties": False}}}]


def req(i, expected="unset"):
    meta = {} if expected == "unset" else {"expected": expected}
    return VerifyRequest(f"r{i}", {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}, meta)


def ok(i, response):
    return Outcome(f"r{i}", True, response, 200, None, 1, 0.0)


GOOD = tool_response([("lookup", '{"key": "k1"}')])


def test_schema_validity_of_single_responses():
    assert score_response(req(0), ok(0, GOOD)).calls_valid is True
    for bad, why in ((tool_response([("lookup", '{"key": "k1"')]), "not valid JSON"),
                     (tool_response([("lookup", '{"key": 3}')]), "is not of type 'string'"),
                     (tool_response([("lookup", '{"key": "a", "x": 1}')]), "Additional properties"),
                     (tool_response([("find", '{"key": "a"}')]), "unknown tool 'find'"),
                     (tool_response([]), "no tool_calls")):
        s = score_response(req(0), ok(0, bad))
        assert s.triggered and s.calls_valid is False and why in s.error, (s.error, why)
    s = score_response(req(0), ok(0, text_response()))
    assert not s.triggered and s.calls_valid is None and s.valid
    # tool_calls present but finish_reason "stop": not a trigger (the public verifier's definition), recorded
    s = score_response(req(0), ok(0, tool_response([("lookup", '{"key": "k1"}')], finish="stop")))
    assert not s.triggered and s.has_tool_calls
    failed = score_response(req(0), Outcome("r0", False, None, 500, "http_500", 3, 1.0))
    assert not failed.ok and failed.failure == "http_500"


def test_trigger_prf_and_summary_counts_checked_by_hand():
    # reference triggers on r0..r5; the model on r0, r1, r2, r3 (r3's call is invalid) and r6, r7.
    # TP = 4 (r0-r3), FN = 2 (r4, r5), FP = 2 (r6, r7), TN = 2 (r8, r9):
    # P = 4/6, R = 4/6, F1 = 2*4 / (2*4 + 2 + 2) = 8/12. r10 fails in the model: left out of the counts.
    reqs = [req(i) for i in range(11)]
    ref = {f"r{i}": ok(i, GOOD if i < 6 else text_response()) for i in range(11)}
    bad = tool_response([("lookup", "{}")])
    model = {f"r{i}": ok(i, bad if i == 3 else GOOD if i in (0, 1, 2, 6, 7) else text_response("x", "length"
                                                                                             if i == 9 else "stop"))
             for i in range(10)}
    model["r10"] = Outcome("r10", False, None, None, "timeout", 3, 60.0)
    c = trigger_counts(score_run(reqs, model), score_run(reqs, ref))
    assert (c.tp, c.fp, c.fn, c.tn) == (4, 2, 2, 2)
    assert math.isclose(c.precision, 4 / 6) and math.isclose(c.recall, 4 / 6) and math.isclose(c.f1, 8 / 12)
    s = run_summary(score_run(reqs, model))
    assert (s["finish_tool_calls"], s["finish_stop"], s["finish_others"], s["failure_count"]) == (6, 3, 1, 1)
    assert s["finish_others_detail"] == {"length": 1}
    assert (s["count_finish_reason_tool_calls"], s["count_successful_tool_call"]) == (6, 5)
    assert math.isclose(s["schema_accuracy"], 5 / 6)


def test_prf_agrees_with_sklearn():
    sk = __import__("pytest").importorskip("sklearn.metrics")
    import random

    rng = random.Random(3)
    m = [rng.random() < 0.6 for _ in range(200)]
    r = [rng.random() < 0.5 for _ in range(200)]
    reqs = [req(i) for i in range(200)]
    score = lambda xs: score_run(reqs, {f"r{i}": ok(i, GOOD if x else text_response()) for i, x in enumerate(xs)})  # noqa: E731
    c = trigger_counts(score(m), score(r))
    assert math.isclose(c.f1, sk.f1_score(r, m)) and math.isclose(c.precision, sk.precision_score(r, m))
    assert math.isclose(c.recall, sk.recall_score(r, m))


def test_oracle_match():
    want = {"name": "lookup", "arguments": {"key": "k1"}}
    assert score_response(req(0, want), ok(0, GOOD)).oracle_match is True
    assert score_response(req(0, want), ok(0, tool_response([("lookup", '{"key": "k2"}')]))).oracle_match is False
    assert score_response(req(0, None), ok(0, text_response())).oracle_match is True
    assert score_response(req(0, None), ok(0, GOOD)).oracle_match is False
    assert score_response(req(0), ok(0, GOOD)).oracle_match is None


def test_a_message_that_is_not_an_object_is_a_malformed_response_not_a_crash():
    s = score_response(req(0), ok(0, {"choices": [{"message": "lookup k1", "finish_reason": "stop"}]}))
    assert not s.ok and s.failure == "response message is a JSON str, not an object"
