"""The HTTP endpoint client against a loopback server that injects faults."""

import json
import socket
import subprocess
import sys
import time

import pytest

from qdrift.backends.endpoint import replay
from qdrift.backends.openai_client import OpenAIEndpoint, is_retried, parse_retry_after

KEY = "sk-test-9f3c1e7d-never-log-me"


def endpoint(server, **kw):
    opts = {"timeout_s": 0.4, "max_attempts": 3, "backoff_base_s": 0.01, "backoff_cap_s": 0.05,
            "api_key_env": "QDRIFT_TEST_KEY"}
    return OpenAIEndpoint(server.base_url, "served-model", **{**opts, **kw})


def body(text="hi", **kw):
    return {"messages": [{"role": "user", "content": text}], **kw}


# what each scripted request should end as: (steps, ok, reason, attempts)
MIXED = {
    "ok": (["ok"], True, None, 1),
    "stream": (["stream"], True, None, 1),
    "500-then-ok": (["500", "ok"], True, None, 2),
    "503-always": (["503"], False, "http_503", 3),
    "400": (["400"], False, "http_400", 1),
    "hang-then-ok": (["hang", "ok"], True, None, 2),
    "hang-always": (["hang"], False, "timeout", 3),
    "malformed": (["malformed"], False, "malformed_json", 1),
    "not-a-completion": (["notcompletion"], False, "malformed_json", 1),
    "html": (["html"], False, "wrong_content_type", 1),
    "truncated": (["truncated"], False, "truncated_stream", 1),
    "echo-auth": (["echo_auth"], False, "http_401", 1),
}


def mixed_batch(server):
    reqs = []
    for rid, (steps, *_rest) in MIXED.items():
        server.script(rid, *steps)
        streaming = steps[0] in ("stream", "truncated")
        reqs.append((rid, body(rid, stream=True) if streaming else body(rid)))
    return reqs


def test_mixed_batch_every_request_ends_with_its_reason_and_attempt_count(fault_server, tmp_path, monkeypatch):
    monkeypatch.setenv("QDRIFT_TEST_KEY", KEY)
    t0 = time.monotonic()
    with endpoint(fault_server) as ep:
        outcomes = replay(ep, mixed_batch(fault_server), tmp_path / "j.jsonl", concurrency=4)
    wall = time.monotonic() - t0
    assert sorted(outcomes) == sorted(MIXED)
    for rid, (_, ok, reason, attempts) in MIXED.items():
        out = outcomes[rid]
        assert (out.ok, out.reason, out.attempts) == (ok, reason, attempts), rid
        assert len(fault_server.hits_for(rid)) == attempts, rid
        assert (out.error is None) == ok, rid
    assert outcomes["503-always"].error.startswith("attempts exhausted (3 of 3)")
    assert outcomes["hang-always"].status is None and outcomes["503-always"].status == 503
    journal = [json.loads(line) for line in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert sorted(r["request_id"] for r in journal) == sorted(MIXED)  # one line per request, none dropped
    assert wall < 5, f"the mixed batch took {wall:.1f} s"
    # the key reached the server, in the Authorization header
    assert {auth for _, _, auth in fault_server.hits} == {f"Bearer {KEY}"}


def test_stream_is_reassembled_into_the_same_completion_as_plain_json(fault_server):
    with endpoint(fault_server) as ep:
        plain = ep.complete(body(), "a")
        fault_server.script("b", "stream")
        streamed = ep.complete(body(stream=True), "b")
    assert plain.ok and streamed.ok
    assert streamed.response["choices"][0]["message"] == plain.response["choices"][0]["message"]
    assert streamed.response["choices"][0]["finish_reason"] == "tool_calls"
    assert streamed.response["usage"] == plain.response["usage"]


def test_retry_after_seconds_is_waited_before_the_retry(fault_server):
    fault_server.script("slow", "429:1", "ok")
    with endpoint(fault_server) as ep:
        out = ep.complete(body(), "slow")
    first, second = fault_server.hits_for("slow")
    assert out.ok and out.attempts == 2
    assert second - first >= 1.0  # the jittered backoff alone would wait at most 0.05 s


def test_retry_after_is_capped(fault_server):
    fault_server.script("capped", "429:30", "ok")
    with endpoint(fault_server, max_retry_after_s=0.2) as ep:
        out = ep.complete(body(), "capped")
    first, second = fault_server.hits_for("capped")
    assert out.ok and 0.2 <= second - first < 2


def test_retry_after_parses_seconds_and_http_dates():
    now = 1_700_000_000.0
    assert parse_retry_after("3", now) == 3.0
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:25 GMT", now) == pytest.approx(5.0)
    assert parse_retry_after("Tue, 14 Nov 2023 22:13:00 GMT", now) == 0.0  # in the past: no wait
    assert parse_retry_after("soon", now) is None and parse_retry_after(None) is None


def test_rerun_resends_only_the_failures(fault_server, tmp_path):
    reqs = mixed_batch(fault_server)
    journal = tmp_path / "j.jsonl"
    with endpoint(fault_server, max_attempts=1) as ep:
        first = replay(ep, reqs, journal, concurrency=4)
        failed = {rid for rid, o in first.items() if not o.ok}
        assert failed and failed != set(MIXED)
        for rid, (steps, *_rest) in MIXED.items():
            fault_server.script(rid, "stream" if steps[0] in ("stream", "truncated") else "ok")
        before = len(fault_server.hits)
        second = replay(ep, reqs, journal, concurrency=4)
    resent = [rid for rid, _, _ in fault_server.hits[before:]]
    assert sorted(resent) == sorted(failed)
    assert all(o.ok for o in second.values())


def test_dead_endpoint_fails_with_connection_after_retries():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with OpenAIEndpoint(url, "m", timeout_s=0.5, max_attempts=2, backoff_base_s=0.01) as ep:
        out = ep.complete(body(), "x")
    assert (out.ok, out.reason, out.attempts, out.status) == (False, "connection", 2, None)
    assert f"{url}/chat/completions" in out.error and "attempts exhausted" in out.error


def test_api_key_never_leaks(fault_server, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("QDRIFT_TEST_KEY", KEY)
    caplog.set_level("DEBUG")  # httpx and httpcore log requests at DEBUG
    journal = tmp_path / "j.jsonl"
    with endpoint(fault_server, max_attempts=2) as ep:
        outcomes = replay(ep, mixed_batch(fault_server), journal, concurrency=4)
        texts = [repr(ep), str(ep), json.dumps(ep.describe()), repr(ep._key), str(ep._key)]
        with pytest.raises(TypeError) as exc:
            ep.complete("not a dict", "bad")
    assert outcomes["echo-auth"].reason == "http_401" and "invalid credentials" in outcomes["echo-auth"].error
    texts += [journal.read_text(), caplog.text, str(exc.value)] + [repr(o) for o in outcomes.values()]
    assert caplog.records, "nothing was logged, so the log check would be vacuous"
    for text in texts:
        assert KEY not in text
    assert "***" in outcomes["echo-auth"].error  # the echoed key was scrubbed, not dropped unseen
    assert ep.describe()["auth"] == "env QDRIFT_TEST_KEY"


def test_api_key_from_a_config_file_and_errors_that_do_not_quote_it(fault_server, tmp_path):
    good = tmp_path / "key.json"
    good.write_text(json.dumps({"api_key": KEY}))
    with endpoint(fault_server, api_key_env=None, config_file=good) as ep:
        assert ep.complete(body(), "c").ok
    assert fault_server.hits[-1][2] == f"Bearer {KEY}"
    broken = tmp_path / "broken.json"
    broken.write_text('{"api_key": "' + KEY)  # unterminated
    with pytest.raises(ValueError, match="not valid JSON") as exc:
        endpoint(fault_server, api_key_env=None, config_file=broken)
    assert KEY not in str(exc.value)
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ValueError, match="api_key"):
        endpoint(fault_server, api_key_env=None, config_file=tmp_path / "empty.json")
    with pytest.raises(ValueError, match="QDRIFT_UNSET_VAR"):
        endpoint(fault_server, api_key_env="QDRIFT_UNSET_VAR", require_api_key=True)


def test_key_is_not_picklable_so_it_cannot_travel_into_files(fault_server, monkeypatch):
    import pickle

    monkeypatch.setenv("QDRIFT_TEST_KEY", KEY)
    with endpoint(fault_server) as ep, pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(ep._key)


def test_backoff_is_full_jitter_bounded_and_seeded(fault_server):
    a = endpoint(fault_server, backoff_base_s=0.5, backoff_cap_s=2.0, seed=7)
    b = endpoint(fault_server, backoff_base_s=0.5, backoff_cap_s=2.0, seed=7)
    waits = [a._backoff(k, None) for k in range(1, 8)]
    assert waits == [b._backoff(k, None) for k in range(1, 8)]
    assert all(0 <= w <= min(2.0, 0.5 * 2 ** (k - 1)) for k, w in enumerate(waits, 1))
    assert a._backoff(1, 3.0) == 3.0 and a._backoff(1, 500.0) == a.max_retry_after_s


def test_retried_reasons():
    assert all(is_retried(r) for r in ("timeout", "connection", "http_429", "http_500", "http_503"))
    assert not any(is_retried(r) for r in ("http_400", "http_401", "malformed_json", "truncated_stream",
                                            "wrong_content_type", "stream_error"))


def test_bad_settings_are_rejected_with_the_field_named():
    for kw, field in [({"max_attempts": 0}, "max_attempts"), ({"timeout_s": 0}, "timeout_s"),
                      ({"base_url": "127.0.0.1:8000"}, "base_url"),
                      ({"base_url": "http://u:p@127.0.0.1/v1"}, "credentials")]:
        with pytest.raises(ValueError, match=field):
            OpenAIEndpoint(**{"base_url": "http://127.0.0.1:1/v1", "model": "m", **kw})


def test_client_imports_without_torch():
    code = "import sys, qdrift.backends.openai_client, qdrift.backends.endpoint_policy; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_key_echoed_late_in_a_long_error_body_is_scrubbed_before_the_body_is_shortened(fault_server, monkeypatch):
    long_key = KEY + "-" + "k" * 150
    monkeypatch.setenv("QDRIFT_TEST_KEY", long_key)
    fault_server.script("late", "echo_auth_late")
    with endpoint(fault_server) as ep:
        out = ep.complete(body(), "late")
    assert out.reason == "http_401" and "***" in out.error
    for n in range(12, len(long_key)):  # no piece of the key survives, however the text is cut
        assert long_key[:n] not in out.error


def test_a_body_httpx_cannot_decode_is_a_failed_request_not_an_exception(fault_server):
    fault_server.script("gz", "bad_gzip")
    with endpoint(fault_server) as ep:
        out = ep.complete(body(), "gz")
    assert not out.ok and out.reason == "malformed_body" and out.attempts == 1


def test_header_values_a_request_cannot_carry(fault_server, monkeypatch):
    monkeypatch.setenv("QDRIFT_TEST_KEY", "sk-clé")
    with pytest.raises(ValueError, match="env QDRIFT_TEST_KEY holds characters an HTTP header cannot carry") as e:
        endpoint(fault_server)
    assert "clé" not in str(e.value)
    monkeypatch.setenv("QDRIFT_TEST_KEY", KEY)
    fault_server.script("r%C3%A9sum%C3%A9%0A1", "ok")
    with endpoint(fault_server) as ep:
        assert ep.complete(body(), "résumé\n1").ok  # sent percent-encoded
    assert fault_server.hits[-1][0] == "r%C3%A9sum%C3%A9%0A1"


def test_preflight_says_what_is_wrong_before_any_request():
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with OpenAIEndpoint(f"http://127.0.0.1:{port}/v1", "m", name="ref", timeout_s=0.5) as ep:
        assert "ref at http://127.0.0.1" in ep.preflight() and "is not reachable" in ep.preflight()

    def answering(status, payload=None):
        return lambda request: httpx.Response(status, json=payload if payload is not None else {})

    cases = [(answering(200, {"data": [{"id": "other"}, {"id": "x"}]}), "serves other, x, not 'm' (--model)"),
             (answering(401), "refused the request (HTTP 401): check its API key"),
             (answering(404), None),  # a server without /models tells nothing
             (answering(200, {"data": [{"id": "m"}]}), None)]
    for handler, problem in cases:
        with OpenAIEndpoint("http://h/v1", "m", name="ref") as ep:
            ep._client = httpx.Client(transport=httpx.MockTransport(handler))
            found = ep.preflight()
            assert (found is None) if problem is None else (problem in found), found


def test_verify_run_stops_at_a_dead_reference_without_sending_every_request(tmp_path):
    import time

    from qdrift.cli import main

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / "r.jsonl"
    main(["verify", "make-requests", "--env", "pointer_chase", "--horizons", "2", "--seeds", "4", "--out", str(f)])
    t0 = time.monotonic()
    with pytest.raises(SystemExit, match="ref at http://127.0.0.1:.* is not reachable"):
        main(["verify", "run", "--requests", str(f), "--reference", f"ref=http://127.0.0.1:{port}/v1",
              "--endpoint", f"e=http://127.0.0.1:{port}/v1", "--model", "m", "--out", str(tmp_path / "v")])
    assert time.monotonic() - t0 < 10
