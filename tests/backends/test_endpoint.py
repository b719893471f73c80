"""The endpoint seam: replay records every outcome and a rerun resends only what failed."""

import json

import pytest

from qdrift.backends.endpoint import Outcome, read_journal, replay


class Flaky:
    """Fails each request id the first time it sees it, then succeeds."""

    name = "flaky"

    def __init__(self):
        self.seen: list[str] = []

    def complete(self, body, request_id):
        first = request_id not in self.seen
        self.seen.append(request_id)
        if first and request_id.endswith("odd"):
            return Outcome(request_id, False, None, 500, "http_500", 1, 0.0)
        return Outcome(request_id, True, {"echo": body["x"]}, 200, None, 1, 0.0)


def test_replay_records_failures_and_rerun_sends_only_them(tmp_path):
    reqs = [(f"r{i}{'odd' if i % 2 else ''}", {"x": i}) for i in range(6)]
    ep = Flaky()
    first = replay(ep, reqs, tmp_path / "j.jsonl", concurrency=3)
    assert sorted(first) == sorted(r for r, _ in reqs)
    assert [o.ok for o in (first[r] for r, _ in reqs)] == [True, False] * 3
    ep.seen.clear()
    ep.seen.extend(r for r, _ in reqs)  # the fake now succeeds on everything
    second = replay(ep, reqs, tmp_path / "j.jsonl")
    assert all(o.ok for o in second.values())
    assert sorted(ep.seen[6:]) == sorted(r for r, _ in reqs if r.endswith("odd"))  # only the failures
    assert second["r1odd"].response == {"echo": 1}


def test_torn_journal_line_is_ignored(tmp_path):
    j = tmp_path / "j.jsonl"
    j.write_text(json.dumps(Outcome("a", True, {}, 200, None, 1, 0.1).row()) + "\n{\"request_id\": \"b\", \"ok")
    assert list(read_journal(j)) == ["a"]


def test_duplicate_ids_and_bad_concurrency_are_rejected(tmp_path):
    with pytest.raises(ValueError, match="unique"):
        replay(Flaky(), [("a", {"x": 1}), ("a", {"x": 2})], tmp_path / "j.jsonl")
    with pytest.raises(ValueError, match="concurrency"):
        replay(Flaky(), [("a", {"x": 1})], tmp_path / "j.jsonl", concurrency=0)


def test_a_rerun_after_a_torn_line_keeps_every_new_record(tmp_path):
    j = tmp_path / "j.jsonl"
    j.write_text(json.dumps(Outcome("a", True, {}, 200, None, 1, 0.1).row()) + "\n{\"request_id\": \"b\", \"ok")
    ep = Flaky()
    replay(ep, [("a", {"x": 0}), ("b", {"x": 1}), ("c", {"x": 2})], j, concurrency=1)
    assert ep.seen == ["b", "c"]
    assert sorted(read_journal(j)) == ["a", "b", "c"]  # b's new record is not glued onto its torn line
    replay(ep, [("a", {"x": 0}), ("b", {"x": 1}), ("c", {"x": 2})], j)
    assert ep.seen == ["b", "c"]  # successes are never sent again
