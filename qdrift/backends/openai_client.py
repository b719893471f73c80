"""An OpenAI-compatible chat-completions endpoint (vLLM, SGLang, llama.cpp server, OpenAI) over httpx.

`OpenAIEndpoint.complete(body, request_id)` POSTs `body` to `{base_url}/chat/completions` and
always returns an `Outcome`; it never raises for a failed request. Retries: 429, 5xx, timeouts
and connection errors are retried up to `max_attempts` in all, waiting `Retry-After` when the
server sends it (seconds or an HTTP date, capped at `max_retry_after_s`), else exponential
backoff with full jitter: uniform(0, min(backoff_cap_s, backoff_base_s * 2**(attempt-1))).

Failure reasons (`Outcome.reason`, stable strings; `Outcome.error` holds the detail):

    timeout             no response, or a stall mid-body, within timeout_s         retried
    connection          refused, reset or dropped before a full response           retried
    http_<code>         a non-2xx status: http_429 and http_5xx are retried, the others are not
    malformed_json      a 2xx body (or a stream event) that is not JSON, or is JSON but not a
                        chat completion (no "choices" list)                       not retried
    wrong_content_type  a 2xx body that is not application/json (text/event-stream when streaming)
                                                                                   not retried
    truncated_stream    a stream that ended without `data: [DONE]`                 not retried
    stream_error        an error object sent inside a stream                       not retried

A retried reason is the final reason only when every attempt failed: then `attempts` equals
`max_attempts` and `error` begins "attempts exhausted". What is not retried is meant for a later
`replay` rerun, which resends exactly the failures.

Streaming: a body with `"stream": true` is read as server-sent events and reassembled
(qdrift.backends.sse) into one chat-completion response, so callers see the same shape either way.

`timeout_s` bounds connecting and each read (httpx's per-phase timeout), so a long stream that
keeps sending is not cut off, and a server that hangs is.

The API key (qdrift.backends.credentials) is sent only in the Authorization header; it is scrubbed
from every error detail and log message, and the client's repr and `describe()` never show it.
The body's "model" is set to this endpoint's `model`, so recorded requests can be replayed
against another served model.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx

from qdrift.backends.credentials import Secret, load_api_key, scrub
from qdrift.backends.endpoint import Outcome
from qdrift.backends.sse import StreamError, assemble_stream, sse_data

log = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})


def _header_safe(value: str) -> bool:
    """Printable ASCII only: what an HTTP header value can carry as is."""
    return all(32 <= ord(c) < 127 for c in value)


def _shorten(detail: str, limit: int = 600) -> str:
    return detail if len(detail) <= limit else detail[:limit] + f"... ({len(detail)} characters)"


def is_retried(reason: str) -> bool:
    """Whether a failure reason is transient, so the client sends the request again."""
    if reason in ("timeout", "connection"):
        return True
    return reason.startswith("http_") and (reason == "http_429" or reason[5:6] == "5")


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None if absent or unreadable."""
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class _Failed(Exception):
    def __init__(self, reason: str, detail: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(detail)
        self.reason, self.detail, self.status, self.retry_after = reason, detail, status, retry_after


@dataclass
class OpenAIEndpoint:
    """A chat-completions endpoint at `base_url` (e.g. http://127.0.0.1:8000/v1) serving `model`."""

    base_url: str
    model: str
    api_key_env: str | None = "OPENAI_API_KEY"
    config_file: str | Path | None = None
    require_api_key: bool = False
    timeout_s: float = 60.0
    max_attempts: int = 4
    backoff_base_s: float = 0.5
    backoff_cap_s: float = 30.0
    max_retry_after_s: float = 60.0
    seed: int = 0  # seeds the backoff jitter
    max_connections: int = 16
    name: str = field(default="", init=True)
    _key: Secret | None = field(default=None, init=False, repr=False)
    _client: httpx.Client | None = field(default=None, init=False, repr=False)
    _rng: random.Random = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self):
        if not isinstance(self.base_url, str) or urlsplit(self.base_url).scheme not in ("http", "https"):
            raise ValueError(f"base_url must be an http:// or https:// URL, got {self.base_url!r}")
        if urlsplit(self.base_url).username is not None:
            raise ValueError("base_url must not hold credentials (user:password@); give the key through "
                             "api_key_env or config_file instead")
        self.base_url = self.base_url.rstrip("/")
        if not self.model:
            raise ValueError("model must be the served model's name (the body's \"model\" field), got an empty value")
        for name in ("timeout_s", "backoff_cap_s", "max_retry_after_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.backoff_base_s < 0:
            raise ValueError(f"backoff_base_s must be >= 0, got {self.backoff_base_s}")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1 (1 = no retries), got {self.max_attempts}")
        self._key = load_api_key(self.api_key_env, self.config_file, required=self.require_api_key)
        if self._key is not None and not _header_safe(self._key.reveal()):
            where = f"config file {self.config_file}" if self.config_file is not None else f"env {self.api_key_env}"
            raise ValueError(f"the API key from {where} holds characters an HTTP header cannot carry (non-ASCII "
                             "or control characters); check that the whole value is the key")
        self.name = self.name or f"openai:{self.model}@{self.base_url}"
        self._rng = random.Random(self.seed)
        self._client = httpx.Client(timeout=httpx.Timeout(self.timeout_s),
                                    limits=httpx.Limits(max_connections=self.max_connections))

    @property
    def url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def describe(self) -> dict:
        """What a results file or a run config records about the endpoint (never the key)."""
        auth = "none"
        if self._key is not None:
            auth = f"config file {self.config_file}" if self.config_file is not None else f"env {self.api_key_env}"
        return {"backend": "openai", "base_url": self.base_url, "model": self.model, "auth": auth,
                "timeout_s": self.timeout_s, "max_attempts": self.max_attempts,
                "backoff_base_s": self.backoff_base_s, "backoff_cap_s": self.backoff_cap_s,
                "max_retry_after_s": self.max_retry_after_s, "seed": self.seed}

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def preflight(self) -> str | None:
        """One GET of `/models` before a run: what is wrong with the endpoint (unreachable, the key
        refused, another model served), or None. A server without `/models` tells nothing and
        passes. Without it a dead or misnamed endpoint costs every request's retries before the run
        can say anything (a minute and more for a request file of ordinary size)."""
        try:
            response = self._client.get(f"{self.base_url}/models", headers=self._headers("preflight"),
                                        timeout=min(self.timeout_s, 10.0))
        except httpx.HTTPError as e:
            return f"{self.name} at {self.base_url} is not reachable: {scrub(str(e) or type(e).__name__, self._key)}"
        if response.status_code in (401, 403):
            return f"{self.name} at {self.base_url} refused the request (HTTP {response.status_code}): check its API key"
        if response.status_code != 200:
            return None
        try:
            served = [m.get("id") for m in response.json().get("data", []) if isinstance(m, dict)]
        except (ValueError, AttributeError):
            return None
        if served and self.model not in served:
            return f"{self.name} at {self.base_url} serves {', '.join(map(str, served))}, not {self.model!r} (--model)"
        return None

    # ------------------------------------------------------------------------------------ sending

    def _headers(self, request_id: str) -> dict[str, str]:
        rid = str(request_id)
        headers = {"Content-Type": "application/json", "X-Request-ID": rid if _header_safe(rid) else quote(rid, safe="")}
        if self._key is not None:
            headers["Authorization"] = f"Bearer {self._key.reveal()}"
        return headers

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_retry_after_s)
        with self._lock:
            return self._rng.uniform(0.0, min(self.backoff_cap_s, self.backoff_base_s * 2 ** (attempt - 1)))

    def complete(self, body: dict, request_id: str) -> Outcome:
        """Send one chat-completion request, retrying transient failures; never raises for a failed request."""
        if not isinstance(body, dict):
            raise TypeError(f"body must be a dict (a chat-completions request), got {type(body).__name__}")
        body = {**body, "model": self.model}
        t0 = time.monotonic()
        for attempt in range(1, self.max_attempts + 1):
            try:
                response, status = self._attempt(body, request_id)
                return Outcome(request_id, True, response, status, None, attempt, time.monotonic() - t0)
            except _Failed as f:
                detail = _shorten(scrub(f.detail, self._key))  # scrubbed whole: a cut could split the key
                if not is_retried(f.reason) or attempt == self.max_attempts:
                    if is_retried(f.reason):
                        detail = f"attempts exhausted ({attempt} of {self.max_attempts}): {detail}"
                    log.warning("request %s failed (%s) after %d attempt(s): %s", request_id, f.reason, attempt, detail)
                    return Outcome(request_id, False, None, f.status, f.reason, attempt,
                                   time.monotonic() - t0, detail)
                wait = self._backoff(attempt, f.retry_after)
                log.info("request %s attempt %d/%d failed (%s); retrying in %.2f s", request_id, attempt,
                         self.max_attempts, f.reason, wait)
                time.sleep(wait)
        raise AssertionError("unreachable: the last attempt returns")

    def _attempt(self, body: dict, request_id: str) -> tuple[dict, int]:
        stream = bool(body.get("stream"))
        where = self.url
        try:
            with self._client.stream("POST", self.url, json=body, headers=self._headers(request_id)) as r:
                self._check_status(r)
                ctype = r.headers.get("content-type", "").split(";")[0].strip().lower()
                want = "text/event-stream" if stream else "application/json"
                if ctype != want:
                    raise _Failed("wrong_content_type", f"{where} answered {r.status_code} with content type "
                                  f"{ctype or 'none'!r}, expected {want!r}", r.status_code)
                if stream:
                    try:
                        return assemble_stream(sse_data(r.iter_lines())), r.status_code
                    except StreamError as e:
                        raise _Failed(e.reason, e.detail, r.status_code) from None
                    except httpx.TimeoutException as e:
                        raise _Failed("timeout", f"the stream from {where} stalled past {self.timeout_s} s ({type(e).__name__})",
                                      r.status_code) from None
                    except httpx.TransportError as e:
                        raise _Failed("truncated_stream", f"the stream from {where} broke off: {type(e).__name__}: {e}",
                                      r.status_code) from None
                return self._parse_json(r.read(), where, r.status_code), r.status_code
        except httpx.PoolTimeout:  # never sent: every connection was busy
            raise _Failed("timeout", f"no free connection to {where} within {self.timeout_s} s: more requests in "
                          f"flight than max_connections ({self.max_connections}); the request was not sent") from None
        except httpx.TimeoutException as e:
            raise _Failed("timeout", f"no response from {where} within {self.timeout_s} s ({type(e).__name__})") from None
        except httpx.TransportError as e:
            raise _Failed("connection", f"could not reach {where}: {type(e).__name__}: {e}") from None
        except httpx.HTTPError as e:  # e.g. a body whose content encoding does not decode
            raise _Failed("malformed_body", f"{where} sent a response httpx could not read: {type(e).__name__}: {e}") from None

    def _check_status(self, r: httpx.Response) -> None:
        if 200 <= r.status_code < 300:
            return
        try:
            snippet = r.read().decode("utf-8", "replace")  # shortened after the key is scrubbed
        except httpx.HTTPError:
            snippet = ""
        retry_after = parse_retry_after(r.headers.get("retry-after")) if r.status_code in RETRIED_STATUSES else None
        raise _Failed(f"http_{r.status_code}", f"{self.url} answered {r.status_code}: {snippet}",
                      r.status_code, retry_after)

    @staticmethod
    def _parse_json(raw: bytes, where: str, status: int) -> dict:
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise _Failed("malformed_json", f"{where} sent a body that is not JSON ({type(e).__name__}: "
                          f"{getattr(e, 'msg', e)}), {len(raw)} bytes", status) from None
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise _Failed("malformed_json", f"{where} sent JSON that is not a chat completion (no \"choices\" list)", status)
        return data
