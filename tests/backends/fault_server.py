"""A loopback chat-completions server whose answer to each request is scripted, to test failure handling.

`server.script(request_id, "500", "ok")` makes the first request with that X-Request-ID get a 500
and every later one a normal answer (the last step repeats). Without a script a request gets what
its last message asks for (`fault:<step>` anywhere in it), else "ok". Steps:

    ok            200 application/json chat completion (a `lookup` tool call)
    stream        200 text/event-stream: the same completion in pieces, ending with [DONE]
    <code>        that status with a JSON error body (e.g. 500, 503, 400)
    429:<s>       429 with Retry-After: <s> (seconds); 429date:<s> the same as an HTTP date
    hang          wait `hang_s` before answering (past the client's timeout)
    malformed     200 application/json whose body is not JSON
    notcompletion 200 application/json that is JSON but has no "choices"
    truncated     200 text/event-stream cut off before [DONE]
    html          200 text/html
    echo_auth     401 whose body echoes the Authorization header (a leaky server)
    echo_auth_late the same, with the header starting 280 characters into the body
    bad_gzip      200 application/json whose body claims gzip encoding but is not gzip

Every request is recorded in `server.hits` as (request id, monotonic time, Authorization header).
"""

from __future__ import annotations

import email.utils
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COMPLETION = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "fault",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Looking it up.",
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "lookup", "arguments": "{\"key\": \"k1\"}"}}]}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
}

STREAM_CHUNKS = [
    {"id": "chatcmpl-1", "model": "fault", "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Looking"}}]},
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": " it up."}}]},
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{\"key\""}}]}}]},
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": ": \"k1\"}"}}]}}]},
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19}},
]


class FaultServer:
    def __init__(self, hang_s: float = 1.5):
        self.hang_s = hang_s
        self.hits: list[tuple[str, float, str | None]] = []
        self._scripts: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> FaultServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, request_id: str, *steps: str) -> None:
        with self._lock:
            self._scripts[request_id] = list(steps)

    def hits_for(self, request_id: str) -> list[float]:
        return [t for rid, t, _ in self.hits if rid == request_id]

    def _next_step(self, request_id: str, body: dict) -> str:
        with self._lock:
            steps = self._scripts.get(request_id)
            if steps:
                return steps.pop(0) if len(steps) > 1 else steps[0]
        text = str((body.get("messages") or [{}])[-1].get("content", ""))
        if "fault:" in text:
            return text.split("fault:", 1)[1].split()[0]
        return "ok"

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output quiet
                pass

            def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def _sse(self, chunks: list[dict], done: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for chunk in chunks:
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
                if done:
                    self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True

            def do_POST(self):  # noqa: N802 - the http.server hook's name
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                rid = self.headers.get("X-Request-ID", "")
                auth = self.headers.get("Authorization")
                with server._lock:
                    server.hits.append((rid, time.monotonic(), auth))
                body = json.loads(raw or b"{}")
                step = server._next_step(rid, body)
                try:
                    self._answer(step, auth)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def _answer(self, step: str, auth: str | None) -> None:
                js = "application/json"
                if step == "ok":
                    self._send(200, json.dumps(COMPLETION).encode(), js)
                elif step == "stream":
                    self._sse(STREAM_CHUNKS, done=True)
                elif step == "truncated":
                    self._sse(STREAM_CHUNKS[:3], done=False)
                elif step == "hang":
                    time.sleep(server.hang_s)
                    self._send(200, json.dumps(COMPLETION).encode(), js)
                elif step == "malformed":
                    self._send(200, b'{"choices": [{"message": ', js)
                elif step == "notcompletion":
                    self._send(200, b'{"object": "list", "data": []}', js)
                elif step == "html":
                    self._send(200, b"<html><body>Bad gateway</body></html>", "text/html; charset=utf-8")
                elif step == "echo_auth_late":
                    self._send(401, json.dumps({"error": "x" * 270 + f" credentials: {auth}"}).encode(), js)
                elif step == "bad_gzip":
                    self._send(200, b"this is not gzip", js, {"Content-Encoding": "gzip"})
                elif step == "echo_auth":
                    self._send(401, json.dumps({"error": f"invalid credentials: {auth}"}).encode(), js)
                elif step.startswith("429date:"):
                    when = email.utils.formatdate(time.time() + float(step.split(":")[1]), usegmt=True)
                    self._send(429, b'{"error": "slow down"}', js, {"Retry-After": when})
                elif step.startswith("429:"):
                    self._send(429, b'{"error": "slow down"}', js, {"Retry-After": step.split(":")[1]})
                elif step.isdigit():
                    self._send(int(step), json.dumps({"error": f"scripted {step}"}).encode(), js)
                else:
                    raise ValueError(f"unknown fault step {step!r}")

        return Handler
