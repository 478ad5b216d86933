"""Padding buckets and queue bounds: the arithmetic planning and `reconfigure` share."""

from __future__ import annotations

import math


DEFAULT_BUCKET_LADDER = (16, 32, 64, 128, 256, 512)

# -- bounds --------------------------------------------------------------------
# Text bytes one request may carry: what protects the server (memory, and the tokenizer's time), as
# text-embeddings-inference's 2 MB body limit; a single text within it is served however long it is.
DEFAULT_MAX_REQUEST_BYTES = 2 * 1024 * 1024
# A full queue holds about this much work at the server's capacity ...
DEFAULT_QUEUE_BUDGET_MS = 1000
# ... and never fewer requests than this: a burst of 512 single requests is admitted, as
# text-embeddings-inference admits 512 concurrent requests by default.
MIN_QUEUE_SIZE = 512


def default_buckets(max_length: int, ladder: tuple[int, ...] = DEFAULT_BUCKET_LADDER) -> tuple[int, ...]:
    """Padding lengths: powers of two below max_length, then max_length itself.

    Triton's dynamic batcher only merges requests whose tensors have equal
    shapes, so a few fixed lengths let requests batch while wasting little
    compute on padding.
    """
    return tuple(b for b in ladder if b < max_length) + (max_length,)


def normalise_buckets(buckets: list[int] | tuple[int, ...] | None, max_length: int) -> tuple[int, ...]:
    if not buckets:
        return default_buckets(max_length)
    kept = sorted({int(b) for b in buckets if 0 < int(b) <= max_length})
    if not kept or kept[-1] != max_length:
        kept.append(max_length)
    return tuple(kept)


def default_queue_size(budget_ms: int, capacity_rps: float | None) -> int:
    """What a step drains within the latency budget at the server's capacity, never below MIN_QUEUE_SIZE.

    A queue of one batch turned away bursts the server would answer within a second; a queue much larger
    than the budget lets accepted requests wait without bound under overload.
    """
    if not capacity_rps:
        return MIN_QUEUE_SIZE
    return max(MIN_QUEUE_SIZE, math.ceil(budget_ms / 1000 * capacity_rps))
