"""The app: routes, the guard in front of them (key, body size, in-flight bound, metrics), error envelopes.

The API reaches Triton over gRPC only and validates every body first, so the HTTP-parser faults of the
2.51 server (docs/reliability.md) cannot be reached through it.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Iterable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute
from starlette.types import Message, Receive, Scope, Send

from .. import __version__
from . import dispatch, kserve
from .catalog import Catalog
from .errors import ApiError
from .openapi import served_document
from .routes import envelopes, routers
from .routes.families import Envelope
from .state import ApiSettings, ApiState, json_response

OPEN_PATHS = frozenset({"/health"}) | kserve.OPEN  # answered without a key: probes send none
DRAINED = (413, 415)  # refused for its body: read to its end first, so that the client sees the answer
DRAIN_CAP = 64 * 1024 * 1024  # a refused body up to this size is read to its end before the 413


def envelope(path: str, error: ApiError, by_path: dict[str, Envelope] | None = None) -> dict:
    """The error as the route's family writes it (routes.envelopes; an unknown route: OpenAI's)."""
    kind = (envelopes() if by_path is None else by_path).get(path, "openai")
    return getattr(error, kind)()


def error_response(path: str, error: ApiError, by_path: dict[str, Envelope]):
    return json_response(envelope(path, error, by_path), error.status, error.headers)


class Guard:
    """Pure ASGI, before any body is parsed: the key, the body-size bound, the in-flight bound, and a
    count and a latency for every answer (by route, model and status). A POST route's request is then answered
    here (api/dispatch.py), a route of Triton's HTTP protocol by the front (api/kserve/); any other goes to
    FastAPI."""

    def __init__(self, app: FastAPI, state: ApiState, routes: Iterable[BaseRoute]):
        self.app, self.state = app, state
        settings = state.settings
        self.key = settings.api_key.encode() if settings.api_key else None
        self.max_body = settings.max_body_bytes
        self.endpoints = dispatch.endpoints(routes)
        self.front = kserve.Front(state.backend, self.max_body)
        self.metrics: dict[tuple[str, str, str, str], tuple] = {}  # each label set's counter and histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500
        try:
            status = await self.serve(scope, receive, send)
        finally:
            self.record(scope, status, time.perf_counter() - start)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> int:
        """The request answered; its status."""
        path, state = scope["path"], self.state
        headers = dict(scope["headers"])
        v2 = kserve.route(path) if path.startswith("/v2") else None
        kind = "kserve" if v2 else state.envelopes.get(path, "openai")
        refusal = self.refuse(scope, headers, v2)
        if refusal:
            if refusal.status in DRAINED:
                await drain(receive, DRAIN_CAP)
            return await dispatch.refuse(send, refusal, kind)
        endpoint = self.endpoints.get(path) if scope["method"] == "POST" and v2 is None else None
        body = b""
        if endpoint is not None or (scope["method"] in ("POST", "PUT", "PATCH")
                                    and (v2 is not None or b"content-length" not in headers)):
            body = await self.read_bounded(receive)
            if isinstance(body, ApiError):
                return await dispatch.refuse(send, body, kind)
            receive = replay(body)
        state.in_flight += 1
        state.in_flight_gauge.inc()
        try:
            if v2 is not None:
                return await self.front.answer(v2, scope, body, headers, send)
            if endpoint is not None:
                return await dispatch.answer(endpoint, self.app, scope, receive, send, body,
                                             headers.get(b"content-type"), kind)
            return await self.through_fastapi(scope, receive, send)
        finally:
            state.in_flight -= 1
            state.in_flight_gauge.dec()

    async def through_fastapi(self, scope: Scope, receive: Receive, send: Send) -> int:
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                version = (scope.get("state") or {}).get("version")
                if version:  # which version answered: during a canary, either of two
                    message = {**message, "headers": [*message.get("headers", []),
                                                      (dispatch.VERSION_HEADER, version.encode())]}
            await send(message)

        await self.app(scope, receive, sending)
        return status[0]

    def record(self, scope: Scope, status: int, seconds: float) -> None:
        """The answer's count and latency, by route (the app's own, else "unmatched"), model, version, status."""
        served = scope.get("state") or {}
        route = served.get("route") or (scope["path"] if scope["path"] in self.state.route_paths else "unmatched")
        key = (route, served.get("model", ""), served.get("version", ""), str(status))
        children = self.metrics.get(key)
        if children is None:
            children = self.metrics[key] = (self.state.requests.labels(*key), self.state.latency.labels(*key[:3]))
        children[0].inc()
        children[1].observe(seconds)

    def refuse(self, scope: Scope, headers: dict[bytes, bytes], v2: kserve.Route | None = None) -> ApiError | None:
        if self.key and scope["path"] not in OPEN_PATHS:
            given = headers.get(b"authorization", b"")
            scheme, _, token = given.partition(b" ")
            if scheme.lower() != b"bearer" or not secrets.compare_digest(token.strip(), self.key):
                return ApiError(401, "a valid API key is required: Authorization: Bearer <key>", code="invalid_api_key")
        if v2 is not None and v2.kind == "infer" and scope["method"] == "POST":
            media = kserve.media_refusal(headers)  # a form or text body is refused whatever its size
            if media:
                return media
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return self.too_large(int(length))
        if self.state.in_flight >= self.state.settings.max_concurrent_requests:
            return ApiError(429, f"{self.state.in_flight} requests in flight, this server's limit "
                                 "(--max-concurrent-requests); retry shortly")
        return None

    def too_large(self, size: int) -> ApiError:
        return ApiError(413, f"the request body is {size} bytes, over this server's limit of {self.max_body} bytes "
                             "(--max-body-bytes)", code="payload_too_large")

    async def read_bounded(self, receive: Receive) -> bytes | ApiError:
        """The body, refused once over the bound (a body sent without Content-Length, chunked, is counted here)."""
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return ApiError(400, "the client went away before sending the body")
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.max_body:
                await drain(receive, DRAIN_CAP)
                return self.too_large(size)
            more = message.get("more_body", False)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)


async def drain(receive: Receive, cap: int) -> None:
    """Read and drop a refused body (up to cap), so that the client, still sending, reads the 413 rather than a
    reset connection."""
    seen, more = 0, True
    while more and seen <= cap:
        message = await receive()
        if message["type"] != "http.request":
            return
        seen += len(message.get("body", b""))
        more = message.get("more_body", False)


def replay(body: bytes) -> Receive:
    sent = [False]

    async def receive() -> Message:
        if sent[0]:
            return {"type": "http.disconnect"}
        sent[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def create_app(settings: ApiSettings, catalog: Catalog | None = None) -> FastAPI:
    """The app over the repository's models (or over `catalog`, where the caller read them already)."""
    state = ApiState(settings, catalog)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.open()
        try:
            yield
        finally:
            await state.rollouts.drain()
            await state.backend.close()
            state.statistics.flush()
            await state.images.close()

    # Swagger UI and ReDoc from the API itself (fastapi-offline's copies): the docs load where nothing outside is
    # reachable, as Triton often runs.
    app = FastAPIOffline(title="tritonize API", version=__version__, lifespan=lifespan,
                         description="OpenAI, Cohere/Jina and text-embeddings-inference routes in front of Triton "
                                     "Inference Server (gRPC). Served models: "
                                     + ", ".join(f"{m.name} ({m.contract.name})" for m in state.catalog.models))
    app.state.api = state
    served = routers()
    for router in served:
        app.include_router(router)
    app.openapi = served_document(app, state.catalog, settings.max_client_batch_size)  # type: ignore[method-assign]
    state.route_paths = frozenset(route.path for router in served for route in router.routes)
    state.envelopes = envelopes()

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return error_response(request.url.path, exc, state.envelopes)

    @app.exception_handler(RequestValidationError)
    async def invalid_body(request: Request, exc: RequestValidationError):
        return error_response(request.url.path, dispatch.validation_refusal(list(exc.errors())), state.envelopes)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        detail = exc.detail if isinstance(exc.detail, str) else "request refused"
        if exc.status_code == 404:
            detail = f"no route {request.method} {request.url.path}"
        # The router's own headers are kept: a 405 carries `Allow` (RFC 9110), on every route.
        refusal = ApiError(exc.status_code, detail, extra_headers=dict(exc.headers or {}))
        return error_response(request.url.path, refusal, state.envelopes)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        return error_response(request.url.path, ApiError(500, f"{type(exc).__name__}: {exc}"), state.envelopes)

    return Guard(app, state, [route for router in served for route in router.routes])  # type: ignore[return-value]
