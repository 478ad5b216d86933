"""One error type for every route; each route family writes it in its own envelope.

OpenAI's routes answer `{"error": {"message", "type", "param", "code"}}`, text-embeddings-inference's
`{"error", "error_type"}`, NVIDIA NIM's `{"object": "error", "message", "detail", "type"}`, Cohere's embed
`{"id", "message"}`, Triton's HTTP protocol `{"error"}`: clients of each parse their own shape. A status says what kind of failure it is
(`STATUSES`): the guard, the backend, the routes and the OpenAPI document all read that one table.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum


class Kind(str, Enum):
    """What went wrong, in text-embeddings-inference's words (its `error_type`)."""

    VALIDATION = "Validation"  # the request is wrong
    NOT_FOUND = "NotFound"  # no such model or route
    UNAUTHORIZED = "Unauthorized"  # a key is set and the request lacks it
    OVERLOADED = "Overloaded"  # Triton's queues (or the API's in-flight bound) are full
    BACKEND = "Backend"  # Triton failed the request, or cannot serve it here
    UNHEALTHY = "Unhealthy"  # the server does not answer


@dataclass(frozen=True)
class Status:
    kind: Kind
    meaning: str  # the OpenAPI document's description of the answer


# Every error status the API answers: its kind, and what it means to a client.
STATUSES: dict[int, Status] = {
    400: Status(Kind.VALIDATION, "The request cannot be served as asked: the model is of another task, several "
                                 "models could answer and `model` names none, or a value the model does not declare"),
    401: Status(Kind.UNAUTHORIZED, "A key is set (--api-key) and the request lacks `Authorization: Bearer <key>`"),
    404: Status(Kind.NOT_FOUND, "No model of that name is served, or no such route"),
    405: Status(Kind.VALIDATION, "The route does not answer this method; `Allow` lists those it answers"),
    413: Status(Kind.VALIDATION, "The body, or the texts in it, are over this server's limits"),
    415: Status(Kind.VALIDATION, "The body is not JSON"),
    422: Status(Kind.VALIDATION, "The body is malformed JSON or does not fit the route's schema, or asks for "
                                 "what the model cannot answer"),
    424: Status(Kind.BACKEND, "No model of the route's task is served here, or Triton failed the request"),
    429: Status(Kind.OVERLOADED, "Too many requests in flight, or Triton's queues are full; retry after "
                                 "`Retry-After` seconds"),
    500: Status(Kind.BACKEND, "An unexpected fault in the API"),
    503: Status(Kind.UNHEALTHY, "Triton does not answer"),
}
OPENAI_TYPES = {
    Kind.VALIDATION: "invalid_request_error",
    Kind.NOT_FOUND: "invalid_request_error",
    Kind.UNAUTHORIZED: "authentication_error",
    Kind.OVERLOADED: "rate_limit_error",
    Kind.BACKEND: "server_error",
    Kind.UNHEALTHY: "server_error",
}
RETRY_AFTER_S = 1  # what a 429 tells the client to wait


def kind_of(status: int) -> Kind:
    known = STATUSES.get(status)
    return known.kind if known else Kind.BACKEND


@dataclass
class ApiError(Exception):
    status: int
    message: str
    param: str | None = None
    code: str | None = None
    extra_headers: dict[str, str] = field(default_factory=dict)  # what the status asks for besides (405: Allow)

    def __str__(self) -> str:
        return self.message

    @property
    def kind(self) -> Kind:
        return kind_of(self.status)

    def openai(self) -> dict:
        return {"error": {"message": self.message, "type": OPENAI_TYPES[self.kind], "param": self.param,
                          "code": self.code}}

    def tei(self) -> dict:
        return {"error": self.message, "error_type": self.kind.value}

    def nim(self) -> dict:
        return {"object": "error", "message": self.message, "detail": {"param": self.param} if self.param else {},
                "type": OPENAI_TYPES[self.kind]}

    def kserve(self) -> dict:
        """Triton's HTTP protocol's: tritonclient raises its `error` as the exception's message."""
        return {"error": self.message}

    def cohere(self) -> dict:
        return {"id": str(uuid.uuid4()), "message": self.message}

    @property
    def headers(self) -> dict[str, str]:
        return {**self.extra_headers, **({"Retry-After": str(RETRY_AFTER_S)} if self.status == 429 else {})}


def invalid(message: str, param: str | None = None, status: int = 422) -> ApiError:
    return ApiError(status, message, param, "invalid_value")
