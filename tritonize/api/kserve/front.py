"""Triton's HTTP routes (KServe v2: inference, metadata, readiness, health, configuration) served over the API's gRPC
channel: a request is read, bounded and checked here, and only a well-formed one reaches Triton, over gRPC."""

from __future__ import annotations

import re
from dataclasses import dataclass

import orjson
from starlette.types import Scope, Send

from ...serving.texts import graph_refusal
from .. import dispatch
from ..errors import ApiError
from . import answers, bodies

ROUTE = re.compile(r"/v2(?:/health/(?P<health>live|ready)|/models/(?P<model>[^/]+)"
                   r"(?:/versions/(?P<version>[^/]+))?(?:/(?P<action>infer|ready|config))?)?")
OPEN = frozenset({"/v2/health/live", "/v2/health/ready"})  # probes send no key, as to /health
# Triton's gRPC status -> the status its own HTTP port answers (a texts step's refusal aside: the sender's, 400).
STATUS = {"StatusCode.INVALID_ARGUMENT": 400, "StatusCode.NOT_FOUND": 404, "StatusCode.UNAVAILABLE": 503,
          "StatusCode.UNIMPLEMENTED": 501, "StatusCode.RESOURCE_EXHAUSTED": 413, "StatusCode.ALREADY_EXISTS": 409,
          "StatusCode.DEADLINE_EXCEEDED": 504}
RETRY_AFTER = {"Retry-After": "1"}  # a full queue's 503


@dataclass(frozen=True)
class Route:
    kind: str  # "server", "live", "ready", "model", "model_ready", "config", "infer"
    model: str = ""
    version: str = ""

    @property
    def method(self) -> str:
        return "POST" if self.kind == "infer" else "GET"

    @property
    def label(self) -> str:
        """The route as the metrics name it (the model is a label of its own)."""
        return {"server": "/v2", "live": "/v2/health/live", "ready": "/v2/health/ready"}.get(
            self.kind, "/v2/models/{model}" + {"model": "", "model_ready": "/ready"}.get(self.kind, f"/{self.kind}"))


def route(path: str) -> Route | None:
    """The v2 route a path names; None for any other (the API's own /v2/embed, /v2/rerank among them)."""
    found = ROUTE.fullmatch(path)
    if found is None:
        return None
    if found["health"]:
        return Route(found["health"])
    if not found["model"]:
        return Route("server")
    action = found["action"]
    kind = {None: "model", "ready": "model_ready"}.get(action, action)
    return Route(kind, found["model"], found["version"] or "")


def triton_failure(exc) -> ApiError:
    """Triton's own message, under the status its HTTP port gives that gRPC code."""
    code = str(exc.status())
    message = (exc.message() or str(exc)).strip()
    status = 400 if graph_refusal(message) else STATUS.get(code, 500)
    full = code == "StatusCode.UNAVAILABLE" and "queue" in message.lower()
    return ApiError(status, message, extra_headers=RETRY_AFTER if full else {})


async def write(send: Send, status: int, body: bytes, header_length: int | None = None) -> int:
    kind = b"application/octet-stream" if header_length is not None else b"application/json"
    headers = [(b"content-type", kind), (b"content-length", b"%d" % len(body))]
    if header_length is not None:
        headers.append((bodies.HEADER_LENGTH, b"%d" % header_length))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
    return status


async def refuse(send: Send, error: ApiError) -> int:
    """Triton's error shape, `{"error": message}`, which tritonclient raises as its exception's message."""
    return await dispatch.refuse(send, error, "kserve")


class Front:
    """The v2 routes over the backend's gRPC client; a body is parsed whole before Triton is asked anything."""

    def __init__(self, backend, max_body: int):
        self.backend, self.max_body = backend, max_body

    async def answer(self, found: Route, scope: Scope, body: bytes, headers: dict[bytes, bytes], send: Send) -> int:
        scope.setdefault("state", {}).update(route=found.label, model=found.model)
        if scope["method"] != found.method:
            return await refuse(send, ApiError(405, f"{scope['path']} answers {found.method} only",
                                               extra_headers={"Allow": found.method}))
        client = self.backend.client
        if client is None:
            return await refuse(send, ApiError(503, "the API is not connected to Triton"))
        from tritonclient.utils import InferenceServerException

        try:
            if found.kind == "infer":
                return await self.infer(found, body, headers, send)
            timeout = self.backend.timeout_s
            if found.kind in ("live", "ready", "model_ready"):
                ready = await (client.is_server_live(client_timeout=timeout) if found.kind == "live" else
                               client.is_server_ready(client_timeout=timeout) if found.kind == "ready" else
                               client.is_model_ready(found.model, found.version, client_timeout=timeout))
                return await write(send, 200 if ready else 400, b"")
            if found.kind == "server":
                answer = answers.server_metadata(await client.get_server_metadata(client_timeout=timeout))
            elif found.kind == "model":
                answer = answers.model_metadata(
                    await client.get_model_metadata(found.model, found.version, client_timeout=timeout))
            else:
                answer = answers.plain((await client.get_model_config(
                    found.model, found.version, client_timeout=timeout)).config)
            return await write(send, 200, orjson.dumps(answer))
        except ApiError as exc:
            return await refuse(send, exc)
        except InferenceServerException as exc:
            return await refuse(send, triton_failure(exc))

    async def infer(self, found: Route, body: bytes, headers: dict[bytes, bytes], send: Send) -> int:
        header, binary = bodies.split(bodies.decoded(body, headers, self.max_body), headers)
        request = bodies.parse(header, bodies.HEADER_LENGTH in headers)
        raw = bodies.contents(request, binary)
        response = await self.backend.raw_infer(answers.infer_request(request, found.model, found.version, raw))
        written, header_length = answers.infer_answer(response, request)
        return await write(send, 200, written, header_length)
