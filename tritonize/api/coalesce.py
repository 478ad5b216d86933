"""Requests to one ensemble that arrive together, sent to Triton as one request of many rows.

Triton pays its per-request cost (the gRPC call on both sides, the ensemble's scheduling, each step's call) once per
request, whatever it holds: 90-210 µs on a 2-core VM, against a few µs per row in a request of 64 (docs/api.md). So
requests to one ensemble with the same outputs and parameters queue in a lane, and a lane sends its waiting
requests as one Triton request: at the next pass of the event loop where fewer than `in_flight` of its batches are
out (a request that finds the model idle waits for nothing but that pass), when one of them comes back, when the
waiting rows fill a batch, and at the latest `window_s` after the oldest arrived. A batch holds whole requests, at
most the ensemble's max batch size of rows and its first step's bytes per request, so Triton never refuses it for
its size. This is how text-embeddings-inference batches: the next batch forms while the backend is busy.

Each request keeps its own answer and its own error: the rows of a batch's answer are handed back in order, a
batch Triton refuses for what a request holds (a text it cannot read) is sent again a request at a time so that
the refusal reaches only the request that caused it, and any other failure (a full queue, a server that does not
answer) reaches every request of the batch as an error of its own. Nothing waiting is dropped: every request ends
with its answer or an error.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .errors import ApiError

IN_FLIGHT = 2  # batches of one lane out at once; more arrivals wait for one to come back (or for the window)
WINDOW_S = 0.002  # the longest a request waits in a lane
# Triton's refusals of what a request holds (INVALID_ARGUMENT; a Python step's own failure): a batch refused so is
# sent again one request at a time. A full queue (429), a server that does not answer (503) or a timeout is not.
RETRIED_ALONE = frozenset({"StatusCode.INVALID_ARGUMENT", "StatusCode.RESOURCE_EXHAUSTED", "StatusCode.INTERNAL",
                           "StatusCode.UNKNOWN"})

Inputs = Mapping[str, Sequence]
Answer = dict[str, np.ndarray]
# (ensemble, inputs, outputs, parameters) -> the answer: one Triton request
Send = Callable[[str, Inputs, Sequence[str], "dict[str, str] | None"], Awaitable[Answer]]


@dataclass
class TritonFailure(ApiError):
    """A failed Triton call: the API's status, and Triton's gRPC status (what decides a retry alone)."""

    grpc_status: str = ""


@dataclass(eq=False)
class Waiting:
    inputs: Inputs
    rows: int
    size: int  # an upper bound of the bytes its inputs carry
    future: asyncio.Future
    since: float


def size_of(inputs: Inputs) -> int:
    """An upper bound of the bytes a request's inputs carry (UTF-8 takes at most 4 bytes a character)."""
    return sum(4 * len(x) if isinstance(x, str) else len(x) for column in inputs.values() for x in column)


@dataclass(eq=False)
class Lane:
    """The requests waiting for one ensemble, with the same outputs and parameters."""

    ensemble: str
    outputs: tuple[str, ...]
    parameters: dict[str, str] | None
    max_rows: int
    max_bytes: int  # 0: no bound
    waiting: deque[Waiting] = field(default_factory=deque)
    rows: int = 0
    size: int = 0
    in_flight: int = 0
    scheduled: bool = False
    timer: asyncio.TimerHandle | None = None

    def add(self, waiting: Waiting) -> None:
        self.waiting.append(waiting)
        self.rows += waiting.rows
        self.size += waiting.size

    @property
    def full(self) -> bool:
        return self.rows >= self.max_rows or bool(self.max_bytes and self.size >= self.max_bytes)

    def take(self) -> list[Waiting]:
        """The oldest waiting requests that fit one batch (at least one), less those whose callers went away."""
        batch, rows, size = [], 0, 0
        while self.waiting:
            first = self.waiting[0]
            fits = rows + first.rows <= self.max_rows and (not self.max_bytes or size + first.size <= self.max_bytes)
            if batch and not fits:
                break
            self.waiting.popleft()
            self.rows -= first.rows
            self.size -= first.size
            if not first.future.done():
                batch.append(first)
                rows, size = rows + first.rows, size + first.size
        return batch


class Coalescer:
    def __init__(self, send: Send, in_flight: int = IN_FLIGHT, window_s: float = WINDOW_S):
        self.send, self.in_flight, self.window_s = send, in_flight, window_s
        self.lanes: dict[tuple, Lane] = {}
        self._running: set[asyncio.Task] = set()

    async def infer(self, ensemble: str, inputs: Inputs, outputs: Sequence[str], parameters: dict[str, str] | None,
                    max_rows: int, max_bytes: int = 0) -> Answer:
        """The answer to one request of at most `max_rows` rows, sent with the others waiting in its lane."""
        key = (ensemble, tuple(inputs), tuple(outputs), tuple(sorted((parameters or {}).items())))
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = Lane(ensemble, tuple(outputs), parameters, max_rows, max_bytes)
        loop = asyncio.get_running_loop()
        waiting = Waiting(inputs, len(next(iter(inputs.values()))), size_of(inputs), loop.create_future(),
                          loop.time())
        lane.add(waiting)
        if lane.full:
            self._pump(lane)
        elif not lane.scheduled:
            lane.scheduled = True
            loop.call_soon(self._pump, lane)
        return await waiting.future

    def _pump(self, lane: Lane, expired: bool = False) -> None:
        """Send what may leave now: a full batch always, the rest while fewer than `in_flight` batches are out
        (or all of it once the window has passed); a timer for what stays."""
        lane.scheduled = False
        while lane.waiting and (lane.in_flight < self.in_flight or lane.full or expired):
            batch = lane.take()
            if batch:
                lane.in_flight += 1
                task = asyncio.get_running_loop().create_task(self._run(lane, batch))
                self._running.add(task)
                task.add_done_callback(self._running.discard)
        if lane.waiting and lane.timer is None:
            loop = asyncio.get_running_loop()
            delay = max(0.0, lane.waiting[0].since + self.window_s - loop.time())
            lane.timer = loop.call_later(delay, self._expire, lane)

    def _expire(self, lane: Lane) -> None:
        lane.timer = None
        self._pump(lane, expired=True)

    async def _run(self, lane: Lane, batch: list[Waiting]) -> None:
        try:
            if len(batch) == 1:
                await self._alone(lane, batch[0])
                return
            names = batch[0].inputs
            inputs = {n: [x for w in batch for x in w.inputs[n]] for n in names}
            try:
                answer = await self.send(lane.ensemble, inputs, lane.outputs, lane.parameters)
            except TritonFailure as exc:
                if exc.grpc_status not in RETRIED_ALONE:
                    raise
                await asyncio.gather(*(self._alone(lane, w) for w in batch))  # the refusal reaches its request only
                return
            lo = 0
            for w in batch:
                answered(w, {name: values[lo:lo + w.rows] for name, values in answer.items()})
                lo += w.rows
        except BaseException as exc:  # every request of the batch gets an error of its own; none is left waiting
            for w in batch:
                failed(w, exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            lane.in_flight -= 1
            if lane.waiting and not lane.scheduled:
                self._pump(lane)

    async def _alone(self, lane: Lane, waiting: Waiting) -> None:
        try:
            answered(waiting, await self.send(lane.ensemble, waiting.inputs, lane.outputs, lane.parameters))
        except Exception as exc:  # noqa: BLE001 - handed to its request
            failed(waiting, exc)

    async def close(self) -> None:
        """Wait for the batches under way (the app's shutdown)."""
        if self._running:
            await asyncio.gather(*self._running, return_exceptions=True)


def answered(waiting: Waiting, answer: Answer) -> None:
    if not waiting.future.done():
        waiting.future.set_result(answer)


def failed(waiting: Waiting, exc: BaseException) -> None:
    """The request's own copy of the error (a route may rewrite its message), or a 500 for anything unexpected."""
    if waiting.future.done():
        return
    if isinstance(exc, ApiError):
        own = dataclasses.replace(exc, extra_headers=dict(exc.extra_headers))
    elif isinstance(exc, asyncio.CancelledError):
        own = ApiError(503, "the API is shutting down")
    else:
        own = ApiError(500, f"{type(exc).__name__}: {exc}")
    waiting.future.set_exception(own)
