import jsonschema
import pytest

from qdrift.verify.generate import make_requests
from qdrift.verify.requests import read_requests, write_requests


@pytest.fixture(scope="module")
def requests():
    return make_requests(["pointer_chase"], [1, 4, 16], seeds=2)


def test_requests_validate_and_cover_tool_final_and_after_final_steps(requests, tmp_path):
    back = read_requests(write_requests(tmp_path / "r.jsonl", requests))
    assert [r.id for r in back] == [r.id for r in requests]
    kinds = {(r.meta["horizon"], r.meta["kind"]) for r in requests}
    for h in (1, 4, 16):
        assert {(h, "tool"), (h, "final"), (h, "after_final")} <= kinds
    # L=16: steps 0, 8, 15, 16 (answer) and 17 (after the answer); 2 seeds x (3 + 4 + 5) requests in all
    assert sorted(r.meta["step"] for r in requests if r.meta["horizon"] == 16 and r.meta["seed"] == 1_000_000) == [
        0, 8, 15, 16, 17]
    assert len(requests) == 2 * (3 + 5 + 5)


def test_expected_calls_validate_against_their_tools_and_history_is_the_oracle_path(requests):
    for r in requests:
        want = r.meta["expected"]
        msgs = r.body["messages"]
        assert msgs[0]["role"] == "system" and msgs[1]["role"] == "user"
        assert len(msgs) == 2 + 2 * r.meta["step"]
        if want is None:
            assert msgs[-1] == {"role": "tool", "tool_call_id": msgs[-2]["tool_calls"][0]["id"], "content": "done"}
            continue
        (tool,) = [t for t in r.tools if t["function"]["name"] == want["name"]]
        jsonschema.validate(want["arguments"], tool["function"]["parameters"])
        assert (want["name"] == "answer") == (r.meta["kind"] == "final")


def test_history_ids_use_the_functions_name_index_form(requests):
    r = max(requests, key=lambda r: r.meta["step"])
    ids = [m["tool_calls"][0]["id"] for m in r.body["messages"] if m["role"] == "assistant"]
    assert ids[:2] == ["functions.lookup:0", "functions.lookup:1"] and ids[-1].startswith("functions.answer:")


def test_unknown_step_mode_is_an_error():
    with pytest.raises(ValueError, match="steps must be one of sample, all"):
        make_requests(["pointer_chase"], [1], seeds=1, steps="some")


def test_an_environment_takes_its_knobs_as_the_agents_command_does():
    from qdrift.envs.registry import make_environment
    from qdrift.verify.generate import episode_requests, make_requests

    echoed = make_requests(["ledger:echo=1"], [2], [1_000_000], steps="all")
    direct = episode_requests(make_environment("ledger", horizon=2, seed=1_000_000, echo=1), "all")
    assert [r.body for r in echoed] == [r.body for r in direct]
    assert [r.body for r in echoed] != [r.body for r in make_requests(["ledger"], [2], [1_000_000], steps="all")]
