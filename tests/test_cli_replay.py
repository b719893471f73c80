"""`qdrift replay`: counts by reason, a resumable journal, and errors that name the bad line."""

import json

import pytest
from backends.fault_server import FaultServer

from qdrift.cli import main
from qdrift.cli_replay import read_requests


@pytest.fixture
def server():
    s = FaultServer(hang_s=1.0).start()
    yield s
    s.stop()


def write_requests(path, contents):
    lines = [json.dumps({"messages": [{"role": "user", "content": c}], **({"id": i} if i else {})})
             for i, c in contents]
    path.write_text("\n".join(lines) + "\n")


def test_replay_prints_counts_by_reason_and_a_rerun_sends_only_failures(server, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    reqs = tmp_path / "requests.jsonl"
    write_requests(reqs, [("a", "hi"), ("b", "fault:500"), (None, "fault:html"), ("d", "fault:hang"), ("e", "hi")])
    argv = ["replay", "--requests", str(reqs), "--base-url", server.base_url, "--model", "m",
            "--journal", str(tmp_path / "j.jsonl"), "--timeout", "0.3", "--max-attempts", "2"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "sending 5" in out
    counts = {line.split()[0]: int(line.split()[1]) for line in out.splitlines() if line.startswith(" ")}
    assert counts == {"ok": 2, "http_500": 1, "timeout": 1, "wrong_content_type": 1}
    assert sorted({rid for rid, _, _ in server.hits}) == ["3", "a", "b", "d", "e"]  # line 3 has no id
    server.script("b", "ok"), server.script("3", "ok"), server.script("d", "ok")
    before = len(server.hits)
    assert main(argv) == 0
    assert "already succeeded in the journal: 2; sending 3" in capsys.readouterr().out
    assert sorted(rid for rid, _, _ in server.hits[before:]) == ["3", "b", "d"]


def test_a_journal_is_not_resumed_for_another_endpoint_or_edited_requests(server, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    reqs, journal = tmp_path / "requests.jsonl", tmp_path / "j.jsonl"
    write_requests(reqs, [("a", "hi")])

    def run(base_url=server.base_url, model="m"):
        return main(["replay", "--requests", str(reqs), "--base-url", base_url, "--model", model,
                     "--journal", str(journal)])

    assert run() == 0
    lines = journal.read_text()
    for changed, call in (("model", lambda: run(model="other")),
                          ("base_url", lambda: run(base_url=server.base_url.replace("127.0.0.1", "localhost")))):
        with pytest.raises(SystemExit, match=f"holds answers for other {changed}.*Give a new --journal"):
            call()
    write_requests(reqs, [("a", "hello")])  # the same id, another body
    with pytest.raises(SystemExit, match="holds answers for other bodies_sha256"):
        run()
    assert journal.read_text() == lines, "a refused run writes nothing to the journal"


def test_dead_endpoint_message_names_the_url(tmp_path, capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    reqs = tmp_path / "r.jsonl"
    write_requests(reqs, [("a", "hi")])
    url = f"http://127.0.0.1:{port}/v1"
    assert main(["replay", "--requests", str(reqs), "--base-url", url, "--model", "m", "--journal",
                 str(tmp_path / "j.jsonl"), "--max-attempts", "1"]) == 1
    out = capsys.readouterr().out
    assert "connection  1" in out and f"could not connect to {url}/chat/completions" in out


@pytest.mark.parametrize("line, message", [
    ("{not json", ":2: not JSON"),
    ("[1, 2]", ":2: a request must be a JSON object"),
    ('{"id": "a", "messages": [{"role": "user", "content": "x"}]}', ":2: id 'a' repeats the id on line 1"),
    ('{"id": null, "messages": [{"role": "user", "content": "x"}]}', ':2: "id" must be'),
    ('{"id": "z"}', ':2: the body needs a non-empty "messages" list'),
])
def test_malformed_requests_file_errors_name_the_line(tmp_path, line, message):
    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "messages": [{"role": "user", "content": "x"}]}\n' + line + "\n")
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        read_requests(path)


def test_bad_requests_file_exits_with_the_reason(tmp_path):
    with pytest.raises(SystemExit, match="does not exist"):
        main(["replay", "--requests", str(tmp_path / "missing.jsonl"), "--base-url", "http://127.0.0.1:1/v1",
              "--model", "m", "--journal", str(tmp_path / "j.jsonl")])


def test_qdrift_metadata_gives_the_id_and_is_not_sent(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "_input", "content": "s"}, {"role": "user", "content": "x"}],
                                "_qdrift": {"id": "pc-1", "env": "pointer_chase"}}) + "\n"
                    + json.dumps({"id": "top", "messages": [{"role": "user", "content": "y"}],
                                  "_qdrift": {"id": "ignored"}}) + "\n")
    (rid1, body1), (rid2, body2) = read_requests(path)
    assert (rid1, rid2) == ("pc-1", "top")
    assert "_qdrift" not in body1 and "_qdrift" not in body2
    assert [m["role"] for m in body1["messages"]] == ["system", "user"]


def test_metadata_that_is_not_an_object_names_the_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "x"}], "_qdrift": 3}) + "\n")
    with pytest.raises(ValueError, match=r":1: '_qdrift' must be an object"):
        read_requests(path)
