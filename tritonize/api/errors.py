"""One error type for every route; each route family writes it in its own envelope.

OpenAI's routes answer `{"error": {"message", "type", "param", "code"}}`, text-embeddings-inference's
`{"error", "error_type"}`: clients of each parse their own shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(str, Enum):
    """What went wrong, with the status it answers and text-embeddings-inference's name for it."""

    VALIDATION = "Validation"  # 400/413/422: the request is wrong
    NOT_FOUND = "NotFound"  # 404: no such model or route
    UNAUTHORIZED = "Unauthorized"  # 401: a key is set and the request lacks it
    OVERLOADED = "Overloaded"  # 429: Triton's queues (or the API's in-flight bound) are full
    BACKEND = "Backend"  # 424/502: Triton failed the request
    UNHEALTHY = "Unhealthy"  # 503: the server does not answer


OPENAI_TYPES = {
    Kind.VALIDATION: "invalid_request_error",
    Kind.NOT_FOUND: "invalid_request_error",
    Kind.UNAUTHORIZED: "authentication_error",
    Kind.OVERLOADED: "rate_limit_error",
    Kind.BACKEND: "server_error",
    Kind.UNHEALTHY: "server_error",
}
RETRY_AFTER_S = 1  # what a 429 tells the client to wait


@dataclass
class ApiError(Exception):
    status: int
    kind: Kind
    message: str
    param: str | None = None
    code: str | None = None

    def __str__(self) -> str:
        return self.message

    def openai(self) -> dict:
        return {"error": {"message": self.message, "type": OPENAI_TYPES[self.kind], "param": self.param,
                          "code": self.code}}

    def tei(self) -> dict:
        return {"error": self.message, "error_type": self.kind.value}

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_S)} if self.status == 429 else {}


def invalid(message: str, param: str | None = None, status: int = 422) -> ApiError:
    return ApiError(status, Kind.VALIDATION, message, param, "invalid_value")
