"""The POST routes answered straight from the guard: the body decoded and validated once, in pydantic's core
(`model_validate_json`, strict), the handler called, its response model written by orjson, all without FastAPI's
per-request machinery (its middleware stack, routing, dependency solving, a second JSON parse).

The routes stay FastAPI's, declared with their typed bodies, so the OpenAPI document is still written from them;
only the way a request reaches a handler is shorter. A route qualifies when its handler takes its body (one model)
and the request alone, and returns its response model (responses.answered): every POST route here does. Any other
request (a GET, a method a route does not answer) goes through FastAPI as before.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from fastapi import FastAPI
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import Receive, Scope, Send

from .errors import ApiError
from .state import fields_of

log = logging.getLogger("tritonize.api")
JSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS
VERSION_HEADER = b"x-model-version"  # the version of the model that answered
NOT_AN_OBJECT = "the body must be a JSON object (Content-Type: application/json)"


@dataclass(frozen=True)
class Endpoint:
    handler: Callable[..., Awaitable[Any]]  # the route's own function, under responses.answered
    body: type[BaseModel]
    body_name: str
    request_name: str


def endpoints(routes: Iterable[BaseRoute]) -> dict[str, Endpoint]:
    """The POST routes answered here, by path."""
    found = {}
    for route in routes:
        if not isinstance(route, APIRoute) or route.methods != {"POST"}:
            continue
        handler, d = getattr(route.endpoint, "__wrapped__", None), route.dependant
        if (handler is None or len(d.body_params) != 1 or not d.request_param_name or d.path_params
                or d.query_params or d.header_params or d.cookie_params or d.dependencies):
            continue
        model = d.body_params[0].field_info.annotation
        if isinstance(model, type) and issubclass(model, BaseModel):
            found[route.path] = Endpoint(handler, model, d.body_params[0].name, d.request_param_name)
    return found


def validation_refusal(errors: list[Any]) -> ApiError:
    """pydantic's first complaint about a body as one 422 (FastAPI's errors name the body `body`)."""
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    message = f"{where}: {first.get('msg', 'invalid')}" if where else str(first.get("msg", "invalid body"))
    if first.get("type") == "json_invalid":
        message = "the body is not valid JSON"
    elif first.get("type") in ("model_attributes_type", "dict_type", "model_type") and not where:
        message = NOT_AN_OBJECT
    return ApiError(422, message, where or None, "invalid_request")


def is_json(content_type: bytes | None) -> bool:
    """FastAPI's rule: no Content-Type, application/json or application/*+json is read as JSON."""
    if not content_type:
        return True
    kind = content_type.split(b";", 1)[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))


def json_bytes(content: Any) -> bytes:
    """orjson straight from numpy arrays (float32 written as float32, shortest round-trip) and response models."""
    return orjson.dumps(content, default=fields_of, option=JSON_OPTIONS)


async def write(send: Send, status: int, body: bytes, headers: Mapping[str, str] | None = None,
                version: str | None = None) -> int:
    """One JSON answer, written to the server as it is: no response object between."""
    raw = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if headers:
        raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    if version:  # which version answered: during a canary, either of two
        raw.append((VERSION_HEADER, version.encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
    return status


async def refuse(send: Send, error: ApiError, envelope: str, version: str | None = None) -> int:
    """The error in the route's family's envelope (ApiError.openai, .tei, .nim, .cohere)."""
    return await write(send, error.status, json_bytes(getattr(error, envelope)()), error.headers, version)


async def answer(endpoint: Endpoint, app: FastAPI, scope: Scope, receive: Receive, send: Send, raw: bytes,
                 content_type: bytes | None, envelope: str) -> int:
    """One request to a POST route: its status."""
    if not is_json(content_type):
        return await refuse(send, ApiError(422, NOT_AN_OBJECT, None, "invalid_request"), envelope)
    try:
        body = endpoint.body.model_validate_json(raw)
    except ValidationError as exc:
        return await refuse(send, validation_refusal(exc.errors(include_url=False)), envelope)
    scope["app"] = app  # what Request.app, and so state_of, reads
    scope.setdefault("state", {})  # what the handler notes (model, version, headers), read here and by the guard
    request = Request(scope, receive)
    try:
        response = await endpoint.handler(**{endpoint.body_name: body, endpoint.request_name: request})
    except ApiError as exc:
        return await refuse(send, exc, envelope, scope["state"].get("version"))
    except Exception as exc:  # noqa: BLE001 - an unexpected fault is answered, and logged with its traceback
        log.exception("%s %s failed", scope["method"], scope["path"])
        return await refuse(send, ApiError(500, f"{type(exc).__name__}: {exc}"), envelope)
    served = scope["state"]
    return await write(send, 200, json_bytes(response), served.get("response_headers"), served.get("version"))
