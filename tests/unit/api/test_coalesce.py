"""The coalescer's scheduling (api/coalesce.py): what a batch holds, when it leaves, and that every request ends.

A Triton request here is an asyncio function that answers each row with its own number, after the test lets it
(the real server's side is tests/e2e/test_api_coalesce.py).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tritonize.api.coalesce import Coalescer, Lane, TritonFailure, Waiting
from tritonize.api.errors import ApiError


class Triton:
    """Answers every row (a number, as text) with its number; holds each call until its gate opens, where asked."""

    def __init__(self, hold: bool = False):
        self.calls: list[list[int]] = []
        self.gate = asyncio.Event()
        if not hold:
            self.gate.set()

    async def send(self, ensemble, inputs, outputs, parameters):
        rows = [int(r) for r in inputs["ROW"]]
        self.calls.append(rows)
        await self.gate.wait()
        if any(r < 0 for r in rows):
            raise TritonFailure(422, f"Triton: ROW[{[r < 0 for r in rows].index(True)}] is refused",
                                grpc_status="StatusCode.INVALID_ARGUMENT")
        return {"OUT": np.array(rows, dtype=np.int64).reshape(-1, 1)}


def waiting(rows: int, size: int, loop) -> Waiting:
    return Waiting({"ROW": [str(r) for r in range(rows)]}, rows, size, loop.create_future(), 0.0)


def test_a_batch_holds_whole_requests_within_the_rows_and_bytes_bounds() -> None:
    loop = asyncio.new_event_loop()
    try:
        lane = Lane("m", ("OUT",), None, max_rows=4, max_bytes=100)
        for rows, size in ((2, 10), (1, 10), (2, 10), (1, 95), (3, 200)):
            lane.add(waiting(rows, size, loop))
        assert [w.rows for w in lane.take()] == [2, 1]  # 2 + 1, and the next 2 would pass 4 rows
        assert [w.rows for w in lane.take()] == [2]  # 10 + 95 bytes would pass 100
        assert [w.rows for w in lane.take()] == [1]
        assert [w.size for w in lane.take()] == [200]  # over the bound alone: it still goes, alone
        assert lane.rows == lane.size == 0 and not lane.waiting
        gone = waiting(1, 1, loop)
        gone.future.cancel()  # its caller went away
        lane.add(gone)
        lane.add(waiting(1, 1, loop))
        assert [w.future.done() for w in lane.take()] == [False]
    finally:
        loop.close()


async def _together(coalescer: Coalescer, values: list[int]):
    return await asyncio.gather(*(coalescer.infer("m", {"ROW": [str(v)]}, ["OUT"], None, 64) for v in values),
                                return_exceptions=True)


def test_requests_that_arrive_together_leave_as_one_and_each_gets_its_row() -> None:
    triton = Triton()
    answers = asyncio.run(_together(Coalescer(triton.send), [5, 6, 7]))
    assert triton.calls == [[5, 6, 7]]
    assert [a["OUT"].tolist() for a in answers] == [[[5]], [[6]], [[7]]]


def test_a_refused_batch_is_sent_again_a_request_at_a_time() -> None:
    triton = Triton()
    answers = asyncio.run(_together(Coalescer(triton.send), [5, -1, 7]))
    assert triton.calls == [[5, -1, 7], [5], [-1], [7]]
    assert isinstance(answers[1], ApiError) and answers[1].message == "Triton: ROW[0] is refused"
    assert answers[0]["OUT"].tolist() == [[5]] and answers[2]["OUT"].tolist() == [[7]]


def test_a_failure_of_the_call_reaches_every_request_as_its_own_error() -> None:
    async def gone(ensemble, inputs, outputs, parameters):
        raise TritonFailure(503, "Triton: failed to connect", grpc_status="StatusCode.UNAVAILABLE")

    answers = asyncio.run(_together(Coalescer(gone), [1, 2, 3]))
    assert all(isinstance(a, ApiError) and a.status == 503 for a in answers)
    assert len({id(a) for a in answers}) == 3  # a route may rewrite its own error's message


def test_a_lone_request_waits_for_no_window_and_a_busy_lane_for_one_at_most() -> None:
    async def run():
        triton = Triton(hold=True)
        coalescer = Coalescer(triton.send, in_flight=1, window_s=0.05)
        loop = asyncio.get_running_loop()
        start = loop.time()
        first = asyncio.ensure_future(coalescer.infer("m", {"ROW": ["1"]}, ["OUT"], None, 64))
        await asyncio.sleep(0.001)
        assert triton.calls == [[1]]  # it left at the next pass: the lane was idle
        second = asyncio.ensure_future(coalescer.infer("m", {"ROW": ["2"]}, ["OUT"], None, 64))
        third = asyncio.ensure_future(coalescer.infer("m", {"ROW": ["3"]}, ["OUT"], None, 64))
        await asyncio.sleep(0.01)
        assert triton.calls == [[1]]  # the one batch the lane may have out is out: the others wait
        while len(triton.calls) < 2:
            await asyncio.sleep(0.002)
        waited = loop.time() - start
        triton.gate.set()
        answers = await asyncio.gather(first, second, third)
        return triton.calls, waited, [a["OUT"].tolist() for a in answers]

    calls, waited, answers = asyncio.run(run())
    assert calls == [[1], [2, 3]] and answers == [[[1]], [[2]], [[3]]]
    assert 0.05 <= waited < 0.5  # the window, not the first batch's return, sent them


@pytest.mark.parametrize("full", [True, False])
def test_a_full_batch_does_not_wait_for_the_lane(full: bool) -> None:
    async def run():
        triton = Triton(hold=True)
        coalescer = Coalescer(triton.send, in_flight=1, window_s=10.0)
        busy = asyncio.ensure_future(coalescer.infer("m", {"ROW": ["0"]}, ["OUT"], None, 2))
        await asyncio.sleep(0.001)
        waiting = [asyncio.ensure_future(coalescer.infer("m", {"ROW": [str(v)]}, ["OUT"], None, 2))
                   for v in ([1, 2] if full else [1])]
        await asyncio.sleep(0.01)
        calls = list(triton.calls)
        triton.gate.set()
        await asyncio.gather(busy, *waiting)
        return calls

    assert asyncio.run(run()) == ([[0], [1, 2]] if full else [[0]])
