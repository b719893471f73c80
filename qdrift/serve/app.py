"""The FastAPI app: OpenAI's /v1/chat/completions and /v1/models around one ServedModel.

One model, one request at a time: generation holds a lock for the whole turn (a streamed turn
holds it until its last token), so concurrent requests queue and every turn runs exactly as it
would alone. Every response names what was measured: `system_fingerprint` is
qdrift-<version>-<spec hash> and the `x-qdrift-spec` header carries the spec string.

Streaming: without tools, content is sent token by token. With tools, the turn's text is sent
once it is complete, because until then it is unknown whether text is content or call markup;
the chunks are still OpenAI's (role, content and tool_calls deltas, finish_reason, usage, [DONE]).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import queue
import threading
import time
import uuid
from collections.abc import Iterator

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.datastructures import MutableHeaders

from qdrift.backends.credentials import Secret
from qdrift.serve.generation import PreparedTurn, RequestError, ServedModel, StepToken, Turn
from qdrift.serve.messages import MessageError
from qdrift.serve.protocol import (
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    ChoiceLogprobs,
    FunctionCall,
    ResponseMessage,
    TokenLogprob,
    ToolCallOut,
    TopLogprob,
    Usage,
    error_body,
)

SPEC_HEADER = "x-qdrift-spec"


def _describe_errors(errors) -> tuple[str, str | None]:
    parts, param = [], None
    for err in errors:
        where = ""
        for x in err.get("loc", ()):
            if isinstance(x, int):
                where += f"[{x}]"
            # pydantic names the union member it tried ("str", "list[TextPart]"): not part of the path
            elif x != "body" and not str(x).startswith(("list[", "str", "function-after", "literal[")):
                where += f".{x}" if where else str(x)
        param = param or where or None
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field (not part of the chat-completions request qdrift serves)"
        parts.append(f"{where}: {msg}" if where else msg)
    return "; ".join(dict.fromkeys(parts)), param


@functools.cache
def _byte_of_char() -> dict[str, int]:
    """GPT-2's byte-level map, inverted: vocabulary character -> the byte it stands for (built once)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {c: b for b, c in bytes_to_unicode().items()}


def _token_bytes(tokenizer, tid: int, text: str) -> list[int] | None:
    """The token's own UTF-8 bytes. Decoding one token of a character split across tokens gives
    U+FFFD, not its bytes: a byte-level BPE token's bytes are read from its vocabulary string (GPT-2's
    byte-to-character map); otherwise they are not known, and null is what OpenAI's schema allows."""
    if "\ufffd" not in text:
        return list(text.encode("utf-8"))
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ != "ByteLevel":
        return None
    piece = tokenizer.convert_ids_to_tokens(tid)
    to_byte = _byte_of_char()
    if isinstance(piece, str) and piece and all(c in to_byte for c in piece):
        return [to_byte[c] for c in piece]
    return None


def _logprobs(served: ServedModel, tokens: list[StepToken]) -> ChoiceLogprobs:
    def entry(tid: int, lp: float) -> dict:
        text = served.tokenizer.decode([tid], skip_special_tokens=False)
        return {"token": text, "logprob": lp, "bytes": _token_bytes(served.tokenizer, tid, text)}

    return ChoiceLogprobs(content=[
        TokenLogprob(**entry(t.id, t.logprob), top_logprobs=[TopLogprob(**entry(i, lp)) for i, lp in t.top])
        for t in tokens])


def _tool_calls(turn: Turn) -> list[ToolCallOut]:
    return [ToolCallOut(id=cid, function=FunctionCall(name=c.name, arguments=json.dumps(c.arguments, ensure_ascii=False)))
            for cid, c in zip(turn.call_ids, turn.calls, strict=True)]


def _usage(turn: Turn) -> Usage:
    return Usage(prompt_tokens=turn.prompt_tokens, completion_tokens=turn.completion_tokens,
                 total_tokens=turn.prompt_tokens + turn.completion_tokens)


def create_app(served: ServedModel, api_key: Secret | None = None) -> FastAPI:
    """The app serving `served`; run it with uvicorn (qdrift.serve.run) or any ASGI server. With
    `api_key`, every request must carry `Authorization: Bearer <key>` (401 otherwise, as OpenAI answers)."""
    app = FastAPI(title="qdrift serve", version="1")
    lock = threading.Lock()
    spec_label = served.spec or "baseline"
    app.add_middleware(_SpecAndKey, spec_label=spec_label,
                       expected=None if api_key is None else f"Bearer {api_key.reveal()}".encode())

    @app.exception_handler(RequestValidationError)
    async def bad_request(_request: Request, exc: RequestValidationError):
        message, param = _describe_errors(exc.errors())
        return JSONResponse(error_body(f"invalid request: {message}", param), status_code=400)

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": served.name, "object": "model", "created": 0,
                                            "owned_by": "qdrift", "qdrift_spec": spec_label}]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatCompletionRequest, http: Request):
        if request.model is not None and request.model != served.name:
            return JSONResponse(error_body(f"model {request.model!r} is not served here; this server serves "
                                           f"{served.name!r} (GET /v1/models)", "model", code="model_not_found"),
                                status_code=404)
        try:
            turn = served.prepare(request)
        except (RequestError, MessageError) as e:
            return JSONResponse(error_body(str(e), e.param), status_code=400)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return StreamingResponse(_stream(served, lock, turn, rid, created, include_usage),
                                     media_type="text/event-stream")
        cancel = threading.Event()
        decoding = asyncio.get_running_loop().run_in_executor(None, _decode_all, served, lock, turn, cancel)
        while not decoding.done():  # a client that hangs up stops the decoding (it held the model to max_tokens)
            await asyncio.wait([decoding], timeout=DISCONNECT_POLL_S)
            if not decoding.done() and await http.is_disconnected():
                cancel.set()
        tokens = await decoding
        if cancel.is_set():
            return Response(status_code=499)  # nobody reads it (nginx's "client closed request")
        result = served.finish(turn, tokens)
        message = ResponseMessage(content=result.content, tool_calls=_tool_calls(result) or None)
        choice = Choice(message=message, finish_reason=result.finish_reason,
                        logprobs=_logprobs(served, tokens) if turn.sampling.top_logprobs is not None else None)
        return ChatCompletion(id=rid, created=created, model=served.name, system_fingerprint=served.fingerprint,
                              choices=[choice], usage=_usage(result)).model_dump()

    return app


class _SpecAndKey:
    """Tags every response with the spec served and, with a key, refuses requests without it (401).

    Plain ASGI rather than `@app.middleware("http")`: Starlette's BaseHTTPMiddleware stands between the
    endpoint and the connection, so `Request.is_disconnected()` never saw a client hang up."""

    def __init__(self, app, spec_label: str, expected: bytes | None):
        self.app, self.spec_label, self.expected = app, spec_label, expected

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[SPEC_HEADER] = self.spec_label
            await send(message)

        if self.expected is not None:
            sent = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(sent, self.expected):
                refusal = JSONResponse(error_body("invalid or missing API key: send 'Authorization: Bearer <key>'",
                                                  None, code="invalid_api_key"), status_code=401)
                return await refusal(scope, receive, tagged)
        await self.app(scope, receive, tagged)


_END = object()
DISCONNECT_POLL_S = 0.05


def _decode_all(served: ServedModel, lock: threading.Lock, turn: PreparedTurn, cancel: threading.Event):
    with lock:
        return list(served.decode(turn, cancel))


def _decoded(served: ServedModel, lock: threading.Lock, turn: PreparedTurn) -> Iterator[StepToken]:
    """`served.decode(turn)` run under the model lock by a thread of its own, its tokens handed over a
    queue. The lock is never held across a yield to the client: a stream the client reads slowly (or
    stops reading) would otherwise hold it, and requests waiting for it would fill the server's worker
    threads until the stream itself could not be resumed."""
    q: queue.SimpleQueue = queue.SimpleQueue()
    cancel = threading.Event()  # set when the stream is closed (the client went away): decoding stops

    def produce() -> None:
        try:
            with lock:
                for tok in served.decode(turn, cancel):
                    q.put(tok)
        except BaseException as e:  # noqa: BLE001 - handed to the stream, which reports it
            q.put(e)
        finally:
            q.put(_END)

    threading.Thread(target=produce, name="qdrift-stream-decode", daemon=True).start()
    try:
        while (item := q.get()) is not _END:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        cancel.set()


def _stream(served: ServedModel, lock: threading.Lock, turn: PreparedTurn, rid: str, created: int,
            include_usage: bool) -> Iterator[str]:
    want_lp = turn.sampling.top_logprobs is not None

    def chunk(delta: dict, finish: str | None = None, logprobs: list[StepToken] | None = None) -> str:
        lp = _logprobs(served, logprobs).model_dump() if (want_lp and logprobs) else None
        body = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": served.name,
                "system_fingerprint": served.fingerprint,
                "choices": [{"index": 0, "delta": delta, "logprobs": lp, "finish_reason": finish}]}
        if include_usage:
            body["usage"] = None  # OpenAI: null on every chunk but the last, which carries the usage
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    tokens: list[StepToken] = []
    emitted, sent_lp = "", 0
    try:
        for tok in _decoded(served, lock, turn):
            tokens.append(tok)
            if turn.uses_tools:
                continue
            delta = served.stream_text(turn, tokens, emitted)
            if delta:
                emitted += delta
                yield chunk({"content": delta}, logprobs=tokens[sent_lp:])
                sent_lp = len(tokens)
    except Exception as e:  # noqa: BLE001 - the status line is sent; report the failure in the stream
        yield f"data: {json.dumps(error_body(f'generation failed: {type(e).__name__}: {e}', kind='server_error'))}\n\n"
        yield "data: [DONE]\n\n"
        return
    result = served.finish(turn, tokens)
    rest = (result.content or "")[len(emitted):] if (result.content or "").startswith(emitted) else ""
    if rest or (want_lp and sent_lp < len(tokens)):
        yield chunk({"content": rest} if rest else {}, logprobs=tokens[sent_lp:])
    for i, call in enumerate(_tool_calls(result)):
        yield chunk({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                     "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
    yield chunk({}, finish=result.finish_reason)
    if include_usage:
        body = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": served.name,
                "system_fingerprint": served.fingerprint, "choices": [], "usage": _usage(result).model_dump()}
        yield f"data: {json.dumps(body)}\n\n"
    yield "data: [DONE]\n\n"
