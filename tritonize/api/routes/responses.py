"""What every route declares and how it answers: the statuses it documents, in its family's envelope, and the fast
response path (the handler's model written by orjson)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from fastapi.responses import Response

from .. import schemas as s
from ..errors import STATUSES
from ..state import json_response, noted

# What any route may answer before its handler runs (the guard, the router), and what a route that infers adds.
GUARDED = (401, 405, 413, 429)
INFERS = (*GUARDED, 400, 404, 422, 424, 503)


def documented(envelope: type[s.Body], statuses: Sequence[int]) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route: each status it may answer, in the envelope its family's clients parse."""
    return {status: {"model": envelope, "description": STATUSES[status].meaning} for status in sorted(statuses)}


def answered(handler: Callable[..., Awaitable[s.BaseModel]]) -> Callable[..., Awaitable[Response]]:
    """The handler's response model, written by orjson (state.json_response), with the headers the handler
    noted as `response_headers` (state.noted); FastAPI documents the model from the handler's annotation and,
    given a Response, validates nothing again."""

    @functools.wraps(handler)
    async def endpoint(*args: Any, **kwargs: Any) -> Response:
        body = await handler(*args, **kwargs)
        request = kwargs.get("request")
        return json_response(body, headers=noted(request).get("response_headers") if request else None)

    return endpoint
