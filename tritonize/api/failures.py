"""Triton's refusals as the API's: the status a gRPC status code means here, Triton's message kept."""

from __future__ import annotations

import re

from ..serving.texts import graph_refusal
from .coalesce import TritonFailure

REFUSING_NODE = re.compile(r"Name:'([^']*)'")  # onnxruntime's error: the node that failed
# Triton's gRPC status -> the status the API answers. UNAVAILABLE is a full queue (the server sheds load).
STATUS = {
    "StatusCode.UNAVAILABLE": 429,
    "StatusCode.RESOURCE_EXHAUSTED": 413,
    "StatusCode.INVALID_ARGUMENT": 422,
    "StatusCode.NOT_FOUND": 404,
}


def failure_of(code: str, message: str) -> TritonFailure:
    """Triton's own message kept, under the status its gRPC code (`StatusCode.X`) means."""
    status = STATUS.get(code, 424)
    message = message.strip()
    if graph_refusal(message):  # a texts step's refusal (a graph's node failing by design): the sender's error,
        status = 422  # told by the failing node's name, which is the refusal (graph_tokenizer/texts.py)
        named = REFUSING_NODE.search(message)
        message = named.group(1) if named else message
    if code == "StatusCode.UNAVAILABLE" and "queue" not in message.lower():
        status = 503  # nothing listens: the server is down, not busy
    return TritonFailure(status, f"Triton: {message}", grpc_status=code)
