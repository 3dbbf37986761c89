"""The ASGI application: OpenAI's and llama-server's endpoints on Starlette.

``create_app(backend, api_key=...)`` serves ``POST /v1/chat/completions``, ``POST /v1/completions``,
``POST /completion`` (llama-server's native endpoint), ``GET /v1/models`` and ``GET /health``.
A handler parses the body (``protocol``), hands it to the ``Backend`` on a worker thread, and
waits for the scheduler's events on an asyncio queue; a client that disconnects (streaming or
not) cancels its jobs, which frees their cache sequences at the next step. Every error is
answered in OpenAI's ``{"error": {...}}`` form with its status code; nothing a client sends can
stop the server.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import threading
import time
from typing import Any, AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from halter.completion import Completion
from halter.limits import LIMITS
from halter.engine.scheduler import Piece, TokenLogprob
from halter.server import responses as R
from halter.server.backend import Backend, Submitted
from halter.server.protocol import ApiError, GenSpec, parse_chat, parse_completion, parse_native
from halter.server.tools import tool_calls_of

__all__ = ["create_app"]

_PUBLIC = {"/health", "/v1/health"}


def _error(err: ApiError) -> JSONResponse:
    return JSONResponse(err.body(), status_code=err.status)


async def _json(request: Request) -> Any:
    maximum = LIMITS.request_body_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > maximum:
        raise ApiError(413, f"the request body has {declared} bytes; the limit is {maximum} "
                       "(halter.limits request_body_bytes, HALTER_LIMIT_REQUEST_BODY_BYTES)", code="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > maximum:
            raise ApiError(413, f"the request body exceeds {maximum} bytes (halter.limits "
                           "request_body_bytes, HALTER_LIMIT_REQUEST_BODY_BYTES)", code="body_too_large")
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}") from None
    except RecursionError:
        raise ApiError(400, "the request body is nested too deeply to read") from None


class _Run:
    """One request's jobs and the queue their events arrive on."""

    def __init__(self, backend: Backend, spec: GenSpec) -> None:
        self.backend, self.spec = backend, spec
        self.queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self.sub: Submitted | None = None
        self.logprobs: list[list[TokenLogprob]] = [[] for _ in range(spec.n)]
        self.done: dict[int, Completion | BaseException] = {}

    async def start(self, dispatch: "_Dispatch") -> None:
        loop, queue = asyncio.get_running_loop(), self.queue

        def sink(i: int, event: Any) -> None:
            dispatch.push(loop, queue, (i, event))
        self.sub = await asyncio.to_thread(self.backend.submit, self.spec, sink)

    @property
    def constrained(self) -> bool:
        return self.sub is not None and self.sub.constraint.compiled is not None

    async def events(self, request: Request) -> AsyncIterator[tuple[int, Any]]:
        """(choice, Piece | Completion | exception) until every choice has ended."""
        assert self.sub is not None
        checked = time.monotonic()
        while len(self.done) < len(self.sub.jobs):
            if time.monotonic() - checked > 0.5:          # tokens keep coming: still look for a hang-up
                checked = time.monotonic()
                if await request.is_disconnected():
                    self.cancel()
                    return
            try:
                i, event = self.queue.get_nowait()
            except asyncio.QueueEmpty:
                try:
                    i, event = await asyncio.wait_for(self.queue.get(), timeout=0.5)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        self.cancel()
                        return
                    continue
            if isinstance(event, Piece):
                self.logprobs[i].extend(event.logprobs)
            elif isinstance(event, BaseException):
                self.done[i] = event
            else:
                event = self.sub.completion(self.sub.jobs[i])
                self.done[i] = event
            yield i, event

    def cancel(self) -> None:
        if self.sub is not None:
            self.sub.cancel()

    def completions(self) -> list[Completion]:
        for v in self.done.values():
            if isinstance(v, BaseException):
                raise ApiError(500, f"generation failed: {v}", code="generation_failed")
        return [self.done[i] for i in range(len(self.done))]  # type: ignore[misc]


class _Dispatch:
    """Carries scheduler events to the event loops' queues: one wake-up per loop per decode step."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Queue, Any]]] = {}

    def push(self, loop: asyncio.AbstractEventLoop, queue: asyncio.Queue, item: Any) -> None:
        with self._lock:
            self._pending.setdefault(loop, []).append((queue, item))

    def flush(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for loop, items in pending.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:                       # that loop has closed: nobody is listening
                pass


def _deliver(items: list[tuple[asyncio.Queue, Any]]) -> None:
    for queue, item in items:
        queue.put_nowait(item)


def _sse(obj: Any) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _failure(exc: BaseException) -> dict[str, Any]:
    return ApiError(500, f"generation failed: {exc}", code="generation_failed").body()


def create_app(backend: Backend, *, api_key: str | None = None) -> Starlette:
    """The Starlette app serving ``backend``; ``api_key`` (if set) is required as a Bearer token."""
    token_bytes: list[bytes] = backend.model.vocab.token_bytes
    dispatch = getattr(backend, "dispatch", None)
    if dispatch is None:                               # shared by every app serving this backend
        dispatch = backend.dispatch = _Dispatch()
        backend.scheduler.on_step = dispatch.flush

    async def run(request: Request, parse: Callable[[Any], GenSpec],
                  whole: Callable[[_Run, str], dict[str, Any]],
                  stream: Callable[[_Run, str, Request], AsyncIterator[str]], prefix: str) -> Response:
        spec = parse(await _json(request))
        r = _Run(backend, spec)
        await r.start(dispatch)
        cid = R.new_id(prefix)
        if spec.stream:
            async def body() -> AsyncIterator[str]:
                buf: list[str] = []
                try:
                    async for line in stream(r, cid, request):
                        buf.append(line)
                        if r.queue.empty():              # send what one step produced at once
                            yield "".join(buf)
                            buf = []
                    if buf:
                        yield "".join(buf)
                finally:
                    r.cancel()
            return StreamingResponse(body(), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        try:
            async for _ in r.events(request):
                pass
        finally:
            r.cancel()
        return JSONResponse(whole(r, cid))

    # -- /v1/chat/completions -------------------------------------------------------------------
    def chat_whole(r: _Run, cid: str) -> dict[str, Any]:
        cs = r.completions()
        choices = [R.chat_choice(i, c, constrained=r.constrained, tools=r.sub.tools,
                                 logprobs=R.chat_logprobs(r.logprobs[i], token_bytes)
                                 if r.spec.logprobs is not None else None) for i, c in enumerate(cs)]
        return {"id": cid, "object": "chat.completion", "created": r.sub.created, "model": backend.name,
                "system_fingerprint": "halter", "choices": choices, "usage": R.usage_of(r.sub.prompt_tokens, cs)}

    async def chat_stream(r: _Run, cid: str, request: Request) -> AsyncIterator[str]:
        created, name = r.sub.created, backend.name
        for i in range(r.spec.n):
            yield _sse(R.chat_chunk(cid, created, name, [{"index": i, "delta": {"role": "assistant", "content": ""},
                                                          "logprobs": None, "finish_reason": None}]))
        held = ["" for _ in range(r.spec.n)]      # tool requests: text held until it is known not a call
        deciding = [r.sub.tools for _ in range(r.spec.n)]
        async for i, ev in r.events(request):
            if isinstance(ev, Piece):
                lp = R.chat_logprobs(ev.logprobs, token_bytes) if r.spec.logprobs is not None else None
                text = ev.text
                if deciding[i]:
                    held[i] += text
                    if not held[i]:
                        continue
                    if held[i].startswith("{"):
                        continue                              # a call: sent whole at the end
                    deciding[i], text = False, held[i]
                if text or lp:
                    yield _sse(R.chat_chunk(cid, created, name, [{"index": i, "delta": {"content": text},
                                                                  "logprobs": lp, "finish_reason": None}]))
            elif isinstance(ev, BaseException):
                yield _sse(_failure(ev))
            else:
                choice = R.chat_choice(i, ev, constrained=r.constrained, tools=r.sub.tools, logprobs=None)
                delta: dict[str, Any] = {}
                if deciding[i]:
                    calls = tool_calls_of(ev.text) if ev.complete else None
                    if calls:
                        delta["tool_calls"] = [{"index": k, **c} for k, c in enumerate(calls)]
                    elif held[i]:
                        delta["content"] = held[i]
                last = {"index": i, "delta": delta, "logprobs": None, "finish_reason": choice["finish_reason"]}
                if "complete" in choice:
                    last["complete"] = choice["complete"]
                yield _sse(R.chat_chunk(cid, created, name, [last]))
        if len(r.done) < r.spec.n:
            return                                            # the client went away
        if r.spec.include_usage:
            cs = [c for c in r.done.values() if isinstance(c, Completion)]
            yield _sse(R.chat_chunk(cid, created, name, [], usage=R.usage_of(r.sub.prompt_tokens, cs)))
        yield "data: [DONE]\n\n"

    # -- /v1/completions ------------------------------------------------------------------------
    def completion_whole(r: _Run, cid: str) -> dict[str, Any]:
        cs = r.completions()
        choices = [R.completion_choice(i, c, constrained=r.constrained,
                                       logprobs=R.completion_logprobs(r.logprobs[i], token_bytes)
                                       if r.spec.logprobs is not None else None) for i, c in enumerate(cs)]
        if r.spec.echo:
            for ch in choices:
                ch["text"] = r.spec.prompt + ch["text"]
        return {"id": cid, "object": "text_completion", "created": r.sub.created, "model": backend.name,
                "system_fingerprint": "halter", "choices": choices, "usage": R.usage_of(r.sub.prompt_tokens, cs)}

    async def completion_stream(r: _Run, cid: str, request: Request) -> AsyncIterator[str]:
        created, name = r.sub.created, backend.name
        offsets = [0] * r.spec.n
        echoed = [not r.spec.echo] * r.spec.n

        def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> str:
            body: dict[str, Any] = {"id": cid, "object": "text_completion", "created": created, "model": name,
                                    "system_fingerprint": "halter", "choices": choices}
            if usage is not None:
                body["usage"] = usage
            return _sse(body)
        async for i, ev in r.events(request):
            if not echoed[i]:
                echoed[i] = True
                offsets[i] = len(r.spec.prompt)
                yield chunk([{"index": i, "text": r.spec.prompt, "logprobs": None, "finish_reason": None}])
            if isinstance(ev, Piece):
                lp = R.completion_logprobs(ev.logprobs, token_bytes, offsets[i]) \
                    if r.spec.logprobs is not None else None
                offsets[i] += len(ev.text)
                yield chunk([{"index": i, "text": ev.text, "logprobs": lp, "finish_reason": None}])
            elif isinstance(ev, BaseException):
                yield _sse(_failure(ev))
            else:
                last = {"index": i, "text": "", "logprobs": None, "finish_reason": R.finish_reason(ev)}
                if r.constrained:
                    last["complete"] = ev.complete
                yield chunk([last])
        if len(r.done) < r.spec.n:
            return
        if r.spec.include_usage:
            cs = [c for c in r.done.values() if isinstance(c, Completion)]
            yield chunk([], usage=R.usage_of(r.sub.prompt_tokens, cs))
        yield "data: [DONE]\n\n"

    # -- /completion (llama-server) -------------------------------------------------------------
    def native_whole(r: _Run, cid: str) -> dict[str, Any]:
        c = r.completions()[0]
        probs = R.native_probs(r.logprobs[0], token_bytes) if r.spec.logprobs else None
        return R.native_body(c, prompt_tokens=r.sub.prompt_tokens, model=backend.name,
                             constrained=r.constrained, probs=probs)

    async def native_stream(r: _Run, cid: str, request: Request) -> AsyncIterator[str]:
        async for _, ev in r.events(request):
            if isinstance(ev, Piece):
                body: dict[str, Any] = {"content": ev.text, "stop": False}
                if r.spec.logprobs:
                    body["completion_probabilities"] = R.native_probs(ev.logprobs, token_bytes)
                yield _sse(body)
            elif isinstance(ev, BaseException):
                yield _sse(_failure(ev))
            else:
                final = R.native_body(ev, prompt_tokens=r.sub.prompt_tokens, model=backend.name,
                                      constrained=r.constrained, probs=None)
                final["content"] = ""
                yield _sse(final)

    async def chat(request: Request) -> Response:
        return await run(request, parse_chat, chat_whole, chat_stream, "chatcmpl")

    async def completions(request: Request) -> Response:
        return await run(request, parse_completion, completion_whole, completion_stream, "cmpl")

    async def native(request: Request) -> Response:
        return await run(request, parse_native, native_whole, native_stream, "cmpl")

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": backend.name, "object": "model",
                                                         "created": backend.created, "owned_by": "halter"}]})

    async def health(request: Request) -> Response:
        s = backend.scheduler
        return JSONResponse({"status": "ok", "slots_idle": s.n_parallel - s.n_running,
                             "slots_processing": s.n_running, "requests_waiting": s.n_waiting})

    async def on_api_error(request: Request, exc: Exception) -> Response:
        return _error(exc)  # type: ignore[arg-type]

    async def on_http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        message = "Not found: " + request.url.path if status == 404 else str(getattr(exc, "detail", exc))
        return _error(ApiError(status, message, code="not_found" if status == 404 else None))

    async def on_crash(request: Request, exc: Exception) -> Response:
        return _error(ApiError(500, f"internal error: {type(exc).__name__}: {exc}"))

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/completions", completions, methods=["POST"]),
        Route("/completion", native, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/v1/health", health, methods=["GET"]),
    ]
    middleware = [Middleware(_ApiKey, key=api_key)] if api_key else []
    return Starlette(routes=routes, middleware=middleware,
                     exception_handlers={ApiError: on_api_error, HTTPException: on_http_error, Exception: on_crash})


class _ApiKey:
    """Requires ``Authorization: Bearer KEY`` (or ``X-Api-Key: KEY``) except on ``/health``."""

    def __init__(self, app: Any, key: str) -> None:
        self.app, self.key = app, key

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] not in _PUBLIC:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            auth = headers.get("authorization", "")
            given = auth[7:].strip() if auth.lower().startswith("bearer ") else headers.get("x-api-key")
            if not given or not hmac.compare_digest(given.encode(), self.key.encode()):
                err = ApiError(401, "Invalid API Key" if given else "Missing API Key (Authorization: Bearer KEY)",
                               code="invalid_api_key")
                await _error(err)(scope, receive, send)
                return
        await self.app(scope, receive, send)
