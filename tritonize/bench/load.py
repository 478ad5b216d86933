"""A closed-loop asyncio load generator: N workers, each sends its next row when the last answers.

A row is one request: a text, or a pair (query and document, question and
context). Rows are handed out from one shared counter, so the server sees them in
workload order. A run is bounded by a request count (exactly that many
complete) or a duration (no request starts after it). Warm-up requests run
first at the same concurrency and are not recorded.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

Row = tuple[str, ...]
ERROR_SAMPLES = 5
DEFAULT_TIMEOUT_S = 30.0
# A request this many times slower than the run's median (and at least STALL_MIN_MS) is a stall:
# counted on its own, so a rare long wait (a lost wake-up, a timer) shows instead of hiding in p99.
STALL_RATIO = 10.0
STALL_MIN_MS = 50.0


class Sender:
    """Sends one row and returns when the answer has been read; raises on any failure."""

    name = "sender"

    async def send(self, row: Row) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        return None


def requests_of(rows: list[Row], texts: int) -> list:
    """What each request sends, in order: its row (texts=1), or `texts` consecutive rows (wrapping round the
    workload), one request starting at each row, so every request of a run differs."""
    if texts == 1:
        return rows
    return [tuple(rows[(i + j) % len(rows)] for j in range(texts)) for i in range(len(rows))]


def rows_in(item, texts: int) -> tuple[Row, ...]:
    """A request's rows: the row itself where a request holds one, else the rows `requests_of` grouped."""
    return (item,) if texts == 1 else item


# A request's rows -> the ensemble's inputs by name (the contract's `request`, or its `image_request` for
# images: corpus.request_of).
Request = Callable[[Sequence[Row]], dict[str, list]]


class TritonGrpc(Sender):
    """The ensemble over gRPC (tritonclient.grpc.aio), through the project's AsyncTextClient;
    `request` makes the ensemble's inputs of a request's rows; `texts` rows go in each request."""

    def __init__(self, url: str, model: str, request: Request, timeout_s: float = DEFAULT_TIMEOUT_S, texts: int = 1):
        from ..client import AsyncTextClient

        self.client = AsyncTextClient(url, model, timeout_s=timeout_s)
        self.request, self.texts = request, texts

    async def send(self, row) -> None:
        await self.client.infer(self.request(rows_in(row, self.texts)))

    async def close(self) -> None:
        await self.client.close()


class _Http(Sender):
    """One pooled aiohttp session: the same HTTP stack for Triton and the peers.

    aiohttp, not httpx: on a 2-core machine httpx spent ~3.3 ms of CPU per
    request against aiohttp's ~0.55 ms, CPU the system under test then lacks.
    """

    def __init__(self, timeout_s: float):
        import aiohttp

        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        )

    async def close(self) -> None:
        await self.session.close()

    async def _post(self, url: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        async with self.session.post(url, data=body, headers=headers) as resp:
            payload = await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {payload[:200].decode(errors='replace')}")
            json.loads(payload)


class TritonHttp(_Http):
    """The ensemble over Triton's KServe v2 HTTP/JSON API."""

    def __init__(self, url: str, model: str, request: Request, timeout_s: float = DEFAULT_TIMEOUT_S, texts: int = 1):
        super().__init__(timeout_s)
        base = url if url.startswith(("http://", "https://")) else f"http://{url}"
        self.url = f"{base.rstrip('/')}/v2/models/{model}/infer"
        self.request, self.texts = request, texts

    async def send(self, row) -> None:
        rows = rows_in(row, self.texts)
        body = {"inputs": [{"name": name, "shape": [len(rows), 1], "datatype": "BYTES", "data": data}
                           for name, data in self.request(rows).items()]}
        await self._post(self.url, json.dumps(body).encode())


class PeerHttp(_Http):
    """The Starlette peer: the raw UTF-8 text is the body, as in Hugging Face's example; a pair is a
    JSON list of its two texts."""

    def __init__(self, url: str, timeout_s: float = DEFAULT_TIMEOUT_S):
        super().__init__(timeout_s)
        self.url = url.rstrip("/") + "/"

    async def send(self, row: Row) -> None:
        body = row[0] if len(row) == 1 else json.dumps(list(row), ensure_ascii=False)
        await self._post(self.url, body.encode("utf-8"))


JSON_HEADERS = {"Content-Type": "application/json"}  # FastAPI reads a body as JSON only when told so


class OpenAIEmbeddings(_Http):
    """An OpenAI-style /embeddings (Infinity's, and `tritonize api`'s under /v1): one text per request, as
    every other system gets it, or `texts` in one `input` list."""

    def __init__(self, url: str, model: str, timeout_s: float = DEFAULT_TIMEOUT_S, texts: int = 1):
        super().__init__(timeout_s)
        self.url = url.rstrip("/") + "/embeddings"
        self.model, self.texts = model, texts

    async def send(self, row) -> None:
        body = {"model": self.model, "input": [r[0] for r in rows_in(row, self.texts)]}
        await self._post(self.url, json.dumps(body, ensure_ascii=False).encode("utf-8"), JSON_HEADERS)


@dataclass(frozen=True)
class Bound:
    """Stop after `requests` requests, or after `duration_s` seconds (one of them)."""

    requests: int | None = None
    duration_s: float | None = None
    warmup: int = 0  # requests, not recorded

    def __post_init__(self) -> None:
        if (self.requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of requests or duration_s")


@dataclass
class LoadResult:
    """Latencies of completed requests (ms), errors, and wall time of the measured part."""

    concurrency: int
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    refused: int = 0  # of the errors, the server's "full, try later" (bench/load.py is_refusal)
    error_samples: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    client_cpu_s: float = 0.0

    @property
    def completed(self) -> int:
        return len(self.latencies_ms)

    def summary(self) -> dict:
        lat = np.asarray(self.latencies_ms) if self.latencies_ms else np.asarray([np.nan])
        pct = lambda q: round(float(np.percentile(lat, q)), 3)  # noqa: E731
        stall_ms = max(STALL_RATIO * float(np.median(lat)), STALL_MIN_MS)
        return {
            "concurrency": self.concurrency,
            "requests": self.completed + self.errors,
            "completed": self.completed,
            "errors": self.errors,
            "refused": self.refused,
            "error_samples": self.error_samples,
            "latency_ms": {
                "p50": pct(50),
                "p95": pct(95),
                "p99": pct(99),
                "max": round(float(np.max(lat)), 3),
                "mean": round(float(np.mean(lat)), 3),
            },
            "stalls": int(np.sum(lat > stall_ms)),
            "stall_threshold_ms": round(stall_ms, 1),
            "throughput_rps": round(self.completed / self.wall_s, 2) if self.wall_s > 0 else 0.0,
            "wall_s": round(self.wall_s, 3),
            # The load generator shares the machine: how much of one core it used while measuring.
            "client_cpu_pct": round(100.0 * self.client_cpu_s / self.wall_s, 1) if self.wall_s > 0 else 0.0,
        }


def is_refusal(exc: Exception) -> bool:
    """The server said it is full (gRPC UNAVAILABLE; HTTP 429 or 503): a request refused, not a failure."""
    from ..client import ServerError, is_unavailable

    if isinstance(exc, ServerError):
        return is_unavailable(exc)
    return str(exc).startswith(("HTTP 429", "HTTP 503"))


async def _phase(
    send: Callable[[Row], Awaitable[None]],
    rows: list[Row],
    concurrency: int,
    next_index: list[int],
    requests: int | None,
    deadline: float | None,
    record: LoadResult | None,
) -> None:
    issued = [0]

    async def worker() -> None:
        while True:
            if requests is not None and issued[0] >= requests:
                return
            if deadline is not None and time.perf_counter() >= deadline:
                return
            issued[0] += 1
            row = rows[next_index[0] % len(rows)]
            next_index[0] += 1
            start = time.perf_counter()
            try:
                await send(row)
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none stops the run
                if record is not None:
                    record.errors += 1
                    record.refused += is_refusal(exc)
                    if len(record.error_samples) < ERROR_SAMPLES:
                        record.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            if record is not None:
                record.latencies_ms.append((time.perf_counter() - start) * 1e3)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def run_load(
    sender: Sender,
    rows: list[Row],
    concurrency: int,
    bound: Bound,
    on_measure_start: Callable[[], None] | None = None,
) -> LoadResult:
    """Warm up, then measure; `on_measure_start` runs between the two (e.g. a statistics snapshot)."""
    if not rows:
        raise ValueError("no rows to send")
    next_index = [0]
    if bound.warmup:
        await _phase(sender.send, rows, concurrency, next_index, bound.warmup, None, None)
    if on_measure_start:
        on_measure_start()
    result = LoadResult(concurrency)
    cpu0, start = time.process_time(), time.perf_counter()
    deadline = start + bound.duration_s if bound.duration_s is not None else None
    await _phase(sender.send, rows, concurrency, next_index, bound.requests, deadline, result)
    result.wall_s = time.perf_counter() - start
    result.client_cpu_s = time.process_time() - cpu0
    return result


def measure(
    make_sender: Callable[[], Sender],
    rows: list[Row],
    concurrency: int,
    bound: Bound,
    on_measure_start: Callable[[], None] | None = None,
) -> LoadResult:
    """Blocking wrapper: one event loop per measurement, so nothing leaks between systems."""

    async def main() -> LoadResult:
        sender = make_sender()
        try:
            return await run_load(sender, rows, concurrency, bound, on_measure_start)
        finally:
            await sender.close()

    with heap_frozen():
        return asyncio.run(main())


@contextmanager
def heap_frozen() -> Iterator[None]:
    """The collector passes over only what a measurement allocates: a full pass over a large heap (torch's, a
    test session's) stops the generator for 100-500 ms, and every request in flight would count the pause as the
    server's latency. The collector still runs, so the run's own garbage stays bounded."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
