import math

import pytest

from qdrift.backends.endpoint import Outcome
from qdrift.verify.metrics import score_run
from qdrift.verify.requests import VerifyRequest
from qdrift.verify.stats import compare_to_reference, noise_floor
from tests.verify.fakes import FakeEndpoint, expected_of

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}}]
N = 400


@pytest.fixture(scope="module")
def requests():
    # three of four requests expect a call, one expects a plain reply
    return [VerifyRequest(f"q{i}", {"messages": [{"role": "user", "content": str(i)}], "tools": TOOLS},
                          {"expected": None if i % 4 == 3 else {"name": "lookup", "arguments": {"key": f"k{i}"}}})
            for i in range(N)]


def runs(requests, endpoint, repeats=1):
    bodies = [(r.id, r.prepared()) for r in requests]
    return [score_run(requests, {rid: endpoint.complete(b, rid) for rid, b in bodies}) for _ in range(repeats)]


def test_noise_floor_of_a_noisy_reference_is_below_one_and_covers_the_known_rate(requests):
    # The fake calls when a call is expected with p = 0.9 and when none is with q = 0.1, independently per
    # repeat, so two repeats agree on a request with probability 0.9^2 + 0.1^2 = 0.82 either way. Expected
    # counts per request over a pair: TP 0.75*0.81 + 0.25*0.01 = 0.61, FP = FN = 0.09, so F1 ~ 1.22/1.40.
    ref = FakeEndpoint("ref", expected_of(requests), seed=1, p_call=0.9, p_spurious=0.1)
    floor = noise_floor(runs(requests, ref, 3), n_boot=1000)
    agree = floor.row(quantity="trigger agreement (reference vs reference)")
    f1 = floor.row(quantity="trigger F1 (reference vs reference)")
    assert agree["estimate"] < 1 and agree["ci_low"] <= 0.82 <= agree["ci_high"], agree
    assert f1["ci_low"] <= 1.22 / 1.40 <= f1["ci_high"], f1
    assert floor.n == {"requests": N, "dropped": 0, "reference_runs": 3}


def test_noise_floor_needs_two_runs(requests):
    ref = FakeEndpoint("ref", expected_of(requests))
    with pytest.raises(ValueError, match="at least 2 reference runs"):
        noise_floor(runs(requests, ref, 1))


def test_an_endpoint_sampling_like_the_reference_is_equivalent(requests):
    exp = expected_of(requests)
    refs = runs(requests, FakeEndpoint("ref", exp, seed=1, p_call=0.9, p_spurious=0.1), 3)
    (same,) = runs(requests, FakeEndpoint("same", exp, seed=7, p_call=0.9, p_spurious=0.1))
    cmp = compare_to_reference(same, refs, "same", margin=0.06, n_boot=500)
    assert cmp.conclusion == "equivalent within ±0.06", cmp.summary()
    diff = cmp.row(quantity="trigger F1 - floor")
    assert diff["ci_low"] <= 0 <= diff["ci_high"]


def test_a_deterministic_endpoint_identical_to_a_deterministic_reference_is_equivalent(requests):
    exp = expected_of(requests)
    refs = runs(requests, FakeEndpoint("ref", exp), 2)
    (same,) = runs(requests, FakeEndpoint("same", exp))
    cmp = compare_to_reference(same, refs, "same", margin=0.02, n_boot=200)
    assert cmp.conclusion == "equivalent within ±0.02"
    assert cmp.row(quantity="trigger F1")["estimate"] == 1.0 == cmp.row(quantity="trigger F1 floor")["estimate"]


def test_an_endpoint_dropping_30_percent_of_tool_calls_is_detected(requests):
    exp = expected_of(requests)
    refs = runs(requests, FakeEndpoint("ref", exp, seed=1, p_call=0.9, p_spurious=0.1), 3)
    (drop,) = runs(requests, FakeEndpoint("drop", exp, seed=8, p_call=0.9 * 0.7, p_spurious=0.1))
    cmp = compare_to_reference(drop, refs, "drop", margin=0.06, n_boot=500)
    assert cmp.conclusion.startswith("different") and "trigger agreement" in cmp.conclusion
    agree = cmp.row(quantity="trigger agreement - floor")
    assert agree["ci_high"] < 0 and agree["p_value"] < 1e-6
    assert cmp.row(quantity="trigger F1 - floor")["ci_high"] < 0
    assert cmp.row(quantity="trigger recall")["estimate"] < 0.8


def test_invalid_arguments_show_in_validity_and_schema_accuracy(requests):
    exp = expected_of(requests)
    refs = runs(requests, FakeEndpoint("ref", exp), 2)
    (broken,) = runs(requests, FakeEndpoint("broken", exp, seed=3, p_invalid=0.2))
    cmp = compare_to_reference(broken, refs, "broken", margin=0.02, n_boot=200)
    v = cmp.row(quantity="validity - reference")
    assert math.isclose(v["estimate"], -(sum(1 for s in broken if not s.valid) / N))
    assert v["ci_high"] < 0 and cmp.row(quantity="validity McNemar vs reference run 1")["p_value"] < 1e-6
    acc = cmp.row(quantity="schema accuracy (endpoint)")
    assert acc["ci_low"] < 0.8 < acc["ci_high"]
    assert cmp.conclusion == "different: action agreement, validity"  # a malformed call is another action too
    (slight,) = runs(requests, FakeEndpoint("slight", exp, seed=3, p_invalid=0.03))
    cmp = compare_to_reference(slight, refs, "slight", margin=0.08, n_boot=0)
    assert cmp.conclusion == ("equivalent within ±0.08; a significant difference inside the margin: "
                              "action agreement, validity")


def test_one_reference_run_reports_without_a_floor(requests):
    exp = expected_of(requests)
    (ref,) = runs(requests, FakeEndpoint("ref", exp))
    (ep,) = runs(requests, FakeEndpoint("ep", exp))
    cmp = compare_to_reference(ep, [ref], "ep", n_boot=100)
    assert not any(r["quantity"].startswith("trigger F1 - floor") for r in cmp.rows)
    assert any("no noise floor" in n for n in cmp.notes)


def test_one_reference_run_never_claims_equivalence_validity_cannot_see_a_model_that_stops_calling(requests):
    exp = expected_of(requests)
    (ref,) = runs(requests, FakeEndpoint("ref", exp))
    (mute,) = runs(requests, FakeEndpoint("mute", exp, p_call=0.0))  # never calls a tool: every turn "valid"
    cmp = compare_to_reference(mute, [ref], "mute", margin=0.02, n_boot=100)
    assert cmp.row(quantity="validity - reference")["estimate"] == 0.0
    assert cmp.conclusion.startswith("inconclusive: one reference run gives no noise floor")


def test_an_endpoint_failing_requests_the_reference_answered_is_not_called_equivalent(requests):
    exp = expected_of(requests)
    refs = runs(requests, FakeEndpoint("ref", exp), 2)
    good = FakeEndpoint("flaky", exp)
    flaky = score_run(requests, {r.id: good.complete(r.prepared(), r.id) if i < N // 2 else
                                 Outcome(r.id, False, None, 503, "http_503", 4, 0.1, "answered 503")
                                 for i, r in enumerate(requests)})  # the second half fails
    cmp = compare_to_reference(flaky, refs, "flaky", margin=0.02, n_boot=100)
    assert cmp.n["dropped"] == N // 2
    assert cmp.conclusion.startswith("inconclusive: the endpoint failed 50.0% of the requests")
    assert any(f"failed {N // 2} of {N} requests" in n for n in cmp.notes)


class _Test:
    """A stand-in for one paired comparison: its difference p-value and a failing TOST."""

    def __init__(self, p):
        self.rows = [{"quantity": "difference (CLT)", "p_value": p}, {"quantity": "TOST ±0.1", "p_value": 0.5}]

    def row(self, quantity):
        return next(r for r in self.rows if r["quantity"] == quantity)


def test_the_different_verdict_is_holm_adjusted_over_its_tests():
    from statsmodels.stats.multitest import multipletests

    from qdrift.verify.stats import _conclusion

    ps = [0.03, 0.04]
    assert not multipletests(ps, alpha=0.05, method="holm")[0].any()  # neither survives Holm
    tests = [("trigger agreement", _Test(ps[0])), ("validity", _Test(ps[1]))]
    assert _conclusion(tests, None, 0.05) == "no difference detected"
    assert _conclusion([("trigger agreement", _Test(0.001)), ("validity", _Test(0.04))], None, 0.05) == \
        "different: trigger agreement, validity"  # Holm: 0.002 and 0.04 both below 0.05


def test_calls_with_other_arguments_make_the_verdict_different_even_when_triggers_and_validity_agree(requests):
    # The endpoint calls the same tool on the same requests, with valid arguments, but other ones on one
    # request in ten: trigger agreement and validity see nothing; action agreement must.
    exp = expected_of(requests)
    other = {rid: want if want is None or int(rid[1:]) % 10 else {"name": "lookup", "arguments": {"key": "other"}}
             for rid, want in exp.items()}
    refs = runs(requests, FakeEndpoint("ref", exp), 2)
    (shifted,) = runs(requests, FakeEndpoint("shifted", other))
    for margin in (0.05, None):
        cmp = compare_to_reference(shifted, refs, "shifted", margin=margin, n_boot=100)
        assert cmp.row(quantity="trigger agreement - floor")["estimate"] == 0.0
        assert cmp.row(quantity="validity - reference")["estimate"] == 0.0
        action = cmp.row(quantity="action agreement - floor")
        assert action["estimate"] == -0.1 and action["ci_high"] < -0.05, action  # 40 of 400 differ
        assert cmp.conclusion == "different: action agreement", cmp.summary()
    assert any(r["quantity"] == "TOST action agreement ±0.05" for r in
               compare_to_reference(shifted, refs, "shifted", margin=0.05, n_boot=0).rows)
