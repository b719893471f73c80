"""A request file from `qdrift verify make-requests` replays against `qdrift serve` unchanged.

The file carries qdrift's `_qdrift` metadata on every line; the server rejects unknown fields, so
this only passes when replay removes the metadata as `verify run` does.
"""

import json

from qdrift.cli import main


def test_make_requests_file_replays_against_the_served_organism(server, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    reqs = tmp_path / "r.jsonl"
    assert main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "1", "--seeds", "2",
                 "--out", str(reqs)]) == 0
    lines = [json.loads(line) for line in reqs.read_text().splitlines()]
    assert all("_qdrift" in line for line in lines)
    journal = tmp_path / "j.jsonl"
    assert main(["replay", "--requests", str(reqs), "--base-url", server.url, "--model", "organism",
                 "--journal", str(journal), "--concurrency", "1"]) == 0
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted(r["request_id"] for r in rows) == sorted(line["_qdrift"]["id"] for line in lines)
    assert all(r["ok"] and r["status"] == 200 for r in rows)
    assert any(r["response"]["choices"][0]["message"].get("tool_calls") for r in rows)
