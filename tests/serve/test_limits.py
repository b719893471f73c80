"""What one client can do to the server: hang up (decoding stops), ask for too much (400), come without
the key (401), send text that is not Unicode (400, not a 500)."""

import threading
import time

import httpx
import pytest

from qdrift.backends.credentials import Secret
from qdrift.serve import ServerThread
from qdrift.serve.generation import StepToken

ASK = {"messages": [{"role": "user", "content": "Start key: k5."}], "temperature": 0}


def test_a_client_that_hangs_up_stops_its_decoding_and_frees_the_model(server, monkeypatch):
    produced, limit = [], 400

    def slow_decode(turn, cancel=None):  # 10 ms a token: 4 s for the whole budget
        for i in range(turn.sampling.max_tokens):
            time.sleep(0.01)
            produced.append(i)
            yield StepToken(5, 0.0, (), "length" if i == turn.sampling.max_tokens - 1 else None)
            if cancel is not None and cancel.is_set():
                return

    monkeypatch.setattr(server.served, "decode", slow_decode)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/chat/completions", json={**ASK, "max_tokens": limit}, timeout=0.3)
    answer = httpx.post(f"{server.url}/chat/completions", json={**ASK, "max_tokens": 3}, timeout=30)
    assert answer.status_code == 200
    # the second request waited for the model, so the first had stopped: long before its budget
    assert len(produced) - 3 < limit / 2, len(produced)


def test_a_cancelled_decode_yields_no_further_token(server):
    from qdrift.serve.protocol import ChatCompletionRequest

    turn = server.served.prepare(ChatCompletionRequest(**ASK, max_tokens=50))
    cancel = threading.Event()
    cancel.set()
    assert len(list(server.served.decode(turn, cancel))) == 1


def test_max_tokens_above_the_servers_limit_is_a_400_naming_it(client, server, monkeypatch):
    monkeypatch.setattr(server.served, "max_tokens_limit", 100)
    r = client.post("/chat/completions", json={**ASK, "max_tokens": 101})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    assert "exceeds this server's limit of 100" in r.json()["error"]["message"]
    assert client.post("/chat/completions", json={**ASK, "max_tokens": 100}).status_code == 200


def test_with_an_api_key_every_request_needs_it(server):
    with ServerThread(server.served, api_key=Secret("sk-serve-0123456789")) as keyed:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sk-serve-0123456789"}):
            r = httpx.post(f"{keyed.url}/chat/completions", json={**ASK, "max_tokens": 2}, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
            assert httpx.get(f"{keyed.url}/models", headers=headers).status_code == 401
        good = {"Authorization": "Bearer sk-serve-0123456789"}
        assert httpx.post(f"{keyed.url}/chat/completions", json={**ASK, "max_tokens": 2}, headers=good).status_code == 200


def test_an_api_key_variable_that_is_unset_is_refused_before_loading(monkeypatch):
    from qdrift.cli import main

    monkeypatch.delenv("QDRIFT_TEST_SERVE_KEY", raising=False)
    with pytest.raises(SystemExit, match="--api-key-env: no API key: the environment variable 'QDRIFT_TEST_SERVE_KEY'"):
        main(["serve", "organism", "--spec", "baseline", "--api-key-env", "QDRIFT_TEST_SERVE_KEY"])


@pytest.mark.parametrize("body", [
    b'{"messages": [{"role": "user", "content": "a \\ud800 b"}]}',
    b'{"messages": [{"role": "user", "content": "x"}], "stop": ["\\udfff"]}',
])
def test_a_lone_surrogate_is_a_400_in_openais_error_format(client, body):
    r = client.post("/chat/completions", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.headers["content-type"].startswith("application/json")
    assert "lone surrogate" in r.json()["error"]["message"]
