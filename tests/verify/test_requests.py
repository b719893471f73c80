import json

import pytest

from qdrift.verify.requests import VerifyRequest, file_sha256, read_requests, write_requests

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}]


def test_a_public_verifier_line_reads_with_an_id_and_input_role_sent_as_system(tmp_path):
    line = {"messages": [{"role": "_input", "content": "be brief"}, {"role": "user", "content": "find X"}],
            "tools": TOOLS, "temperature": 0.6}
    f = tmp_path / "samples.jsonl"
    f.write_text(json.dumps(line) + "\n\n")
    (req,) = read_requests(f)
    assert req.id.startswith("line1-") and req.meta == {}
    body = req.prepared(model="m", overrides={"max_tokens": 9})
    assert body["messages"][0]["role"] == "system" and body["model"] == "m" and body["max_tokens"] == 9
    assert req.body["messages"][0]["role"] == "_input"  # the file's body is left as it was


def test_round_trip_keeps_ids_and_metadata_and_strips_it_before_sending(tmp_path):
    reqs = [VerifyRequest("a", {"messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}, {"step": 2})]
    f = write_requests(tmp_path / "r.jsonl", reqs)
    (back,) = read_requests(f)
    assert (back.id, back.meta["step"]) == ("a", 2)
    assert "_qdrift" not in back.prepared()
    assert len(file_sha256(f)) == 64


@pytest.mark.parametrize("line, message", [
    ("{not json", "not valid JSON"),
    (json.dumps({"messages": [], "tools": TOOLS}), "'messages' must be a non-empty list"),
    (json.dumps({"messages": [{"role": "robot", "content": ""}], "tools": TOOLS}), "role 'robot'"),
    (json.dumps({"messages": [{"role": "user", "content": ""}]}), "'tools' must be a non-empty list"),
    (json.dumps({"messages": [{"role": "user", "content": ""}], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "wat"}}}]}), "not a valid JSON Schema"),
])
def test_bad_lines_are_errors_naming_the_line(tmp_path, line, message):
    good = json.dumps({"messages": [{"role": "user", "content": "x"}], "tools": TOOLS})
    f = tmp_path / "bad.jsonl"
    f.write_text(good + "\n" + line + "\n")
    with pytest.raises(ValueError, match=message) as e:
        read_requests(f)
    assert "bad.jsonl:2" in str(e.value)


def test_duplicate_ids_are_refused(tmp_path):
    body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "_qdrift": {"id": "same"}}
    f = tmp_path / "dup.jsonl"
    f.write_text(json.dumps(body) + "\n" + json.dumps(body) + "\n")
    with pytest.raises(ValueError, match="already used on line 1"):
        read_requests(f)


def test_an_edited_body_no_longer_matches_its_metadata_and_says_so(tmp_path):
    reqs = [VerifyRequest("a", {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}, {"env": "e"})]
    f = write_requests(tmp_path / "r.jsonl", reqs)
    f.write_text(f.read_text().replace('"x"', '"y"'))
    with pytest.raises(ValueError, match=r"r.jsonl:1: the body differs from the one r.meta.jsonl describes"):
        read_requests(f)


def test_an_older_file_with_inline_metadata_still_reads(tmp_path):
    f = tmp_path / "old.jsonl"
    body = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS, "_qdrift": {"id": "k", "env": "e"}}
    f.write_text(json.dumps(body) + "\n")
    (req,) = read_requests(f)
    assert req.id == "k" and req.meta["env"] == "e" and "_qdrift" not in req.prepared()
