"""A request file from `qdrift verify make-requests` is what the public K2 Vendor Verifier accepts: each
line goes through the real openai client as `client.chat.completions.create(**body)`, as that script
sends it (it refused every request while qdrift's metadata sat inside the bodies), and replays
against `qdrift serve` unchanged, under the ids its metadata file gives."""

import json

import openai

from qdrift.cli import main
from qdrift.verify.requests import meta_path, read_requests


def _make(tmp_path):
    reqs = tmp_path / "r.jsonl"
    assert main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "1", "--seeds", "2",
                 "--out", str(reqs)]) == 0
    return reqs


def k2vv_prepare(request: dict, model: str) -> dict:
    """The public verifier's own preparation of a line: `_input` roles as system, the model set."""
    req = request.copy()
    for message in req.get("messages", []):
        if message.get("role") == "_input":
            message["role"] = "system"
    req["model"] = model
    return req


def test_each_line_is_a_body_the_openai_client_sends_as_the_k2_verifier_does(server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    reqs = _make(tmp_path)
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    lines = [json.loads(line) for line in reqs.read_text().splitlines()]
    assert not any("_qdrift" in line for line in lines)
    for line in lines:
        reply = client.chat.completions.create(**k2vv_prepare(line, "organism"))
        assert reply.choices[0].finish_reason in ("tool_calls", "stop", "length")
    # the metadata is beside the file, and read back with it
    assert meta_path(reqs).is_file()
    back = read_requests(reqs)
    assert all(r.meta["env"] == "pointer_chase" and r.meta["id"] == r.id for r in back)


def test_make_requests_file_replays_against_the_served_organism(server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    reqs = _make(tmp_path)
    journal = tmp_path / "j.jsonl"
    assert main(["replay", "--requests", str(reqs), "--base-url", server.url, "--model", "organism",
                 "--journal", str(journal), "--concurrency", "1"]) == 0
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted(r["request_id"] for r in rows) == sorted(r.id for r in read_requests(reqs))
    assert all(r["ok"] and r["status"] == 200 for r in rows)
    assert any(r["response"]["choices"][0]["message"].get("tool_calls") for r in rows)
