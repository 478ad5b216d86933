"""`tritonize stress`: open-loop overload against a server, and what a bounded server must show under it.

Requests arrive at a fixed mean rate (Poisson arrivals) whether or not the
earlier ones were answered, as real traffic does: a closed loop slows down
with the server and never overloads it. The rate is a multiple of the
capacity measured first (closed loop, concurrency 16, same rows). Each
request ends one way:

- answered, and then checked against the floor's answer for its row (a wrong
  answer is counted, never hidden among the fast ones);
- rejected: UNAVAILABLE / 503 because a step's queue is full;
- failed in any other way;
- hung: no answer within the timeout.

Readiness (`/v2/health/ready`) is polled every POLL_S throughout.

    tritonize stress -r triton_repo --start-local --factor 4 --duration 30

With --burst, it releases N single-row requests at the same instant instead
(as N clients that send together) and says how many were answered: a queue
bound of one batch turned most of a burst away.

    tritonize stress -r triton_repo --start-local --workload short --burst 128,256,512

With --clients N, N clients run a closed loop instead (each sends its next
request as soon as the last is answered or refused), as clients that retry
at once do: it says what share of the capacity the server still answers
(goodput), and, on a local server, what a refusal costs in CPU. The
overload's CPU less what its answers cost at capacity (per answer, measured
in the capacity run) is put down to the refusals; answers in bigger batches
may cost a little less than at capacity, so the figure errs high.

    tritonize stress -r triton_repo --start-local --workload long --clients 128 --duration 30

The measurements are here (`Stress`); the command's flags, document and tables are stress_cli.py's.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import tasks
from ..errors import TritonizeError
from . import check, corpus, floor, load
from .load import heap_frozen
from .cpu import CLIENT, NATIVE_MODEL, NICER, SERVER, CpuMeter
from .measured import measured_model

POLL_S = 0.5
CAPACITY_S = 5.0
CAPACITY_CONCURRENCY = 16
DEFAULT_TIMEOUT_S = 30.0
ROWS = 64  # distinct rows sent (each answer is checked against the floor's)
MAX_LAG_MS = 20.0  # p99 of how late requests leave, beyond which the generator did not keep the rate
BURST_CHANNELS = 8  # gRPC connections a burst is spread over


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


@dataclass
class Outcome:
    """Every request of the open-loop phase, by how it ended (latencies in ms)."""

    rate_rps: float
    duration_s: float
    sent: int = 0
    answered: list[float] = field(default_factory=list)
    rejected: list[float] = field(default_factory=list)
    failed: list[float] = field(default_factory=list)
    hung: int = 0
    wrong: int = 0
    ready_polls: int = 0
    not_ready_polls: int = 0
    lag_ms: list[float] = field(default_factory=list)  # how late each request left against its arrival time
    samples: dict[str, str] = field(default_factory=dict)  # one message per way of ending
    wall_s: float = 0.0  # from the first arrival until the last request ended
    client_cpu_s: float = 0.0  # the load generator's own CPU over `wall_s`

    def summary(self) -> dict:
        return {
            "offered_rps": round(self.sent / self.duration_s, 1),
            "target_rps": round(self.rate_rps, 1),
            "sent": self.sent,
            "answered": len(self.answered),
            "rejected": len(self.rejected),
            "failed": len(self.failed),
            "hung": self.hung,
            "wrong": self.wrong,
            "answered_rps": round(len(self.answered) / self.duration_s, 1),
            "answered_ms": {"p50": _percentile(self.answered, 50), "p99": _percentile(self.answered, 99),
                            "max": _percentile(self.answered, 100)},
            "rejected_ms": {"p50": _percentile(self.rejected, 50), "p99": _percentile(self.rejected, 99),
                            "max": _percentile(self.rejected, 100)},
            "ready_polls": self.ready_polls,
            "not_ready_polls": self.not_ready_polls,
            # A generator that falls behind offers less than the rate and times its own queueing:
            # its figures then say more about the client than the server.
            "generator_lag_ms": {"p50": _percentile(self.lag_ms, 50), "p99": _percentile(self.lag_ms, 99)},
            "generator_kept_up": bool(self.lag_ms) and float(np.percentile(self.lag_ms, 99)) <= MAX_LAG_MS,
            "samples": self.samples,
        }


@dataclass
class ClosedLoop:
    """Every request of a closed loop of `clients`, by how it ended (latencies in ms)."""

    clients: int
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    answered: list[float] = field(default_factory=list)
    rejected: list[float] = field(default_factory=list)
    failed: list[float] = field(default_factory=list)
    wrong: int = 0
    samples: dict[str, str] = field(default_factory=dict)

    def summary(self, capacity_rps: float) -> dict:
        answered_rps = len(self.answered) / self.wall_s
        return {
            "clients": self.clients, "wall_s": round(self.wall_s, 2), "answered": len(self.answered),
            "rejected": len(self.rejected), "failed": len(self.failed), "wrong": self.wrong,
            "answered_rps": round(answered_rps, 1), "rejected_rps": round(len(self.rejected) / self.wall_s, 1),
            # What share of its capacity the server still answers with `clients` in a closed loop.
            "goodput": round(answered_rps / capacity_rps, 3),
            "answered_ms": {"p50": _percentile(self.answered, 50), "p99": _percentile(self.answered, 99),
                            "max": _percentile(self.answered, 100)},
            "rejected_ms": {"p50": _percentile(self.rejected, 50), "p99": _percentile(self.rejected, 99)},
            "samples": self.samples,
        }


def refusal_cpu(at_capacity: dict, overload: dict, answered: int, refused: int) -> dict:
    """ms of CPU per refusal by process: the overload's CPU (`overload`, ms per answered request as
    CpuMeter.finish gives it) less `answered` answers at the capacity run's cost, over `refused`.

    A refusal never reaches the model, whose threads are told apart: the fused step's graph runs on nicer threads
    (cpu.NICER), and the native onnxruntime backend's are the server's busiest (cpu.NATIVE_MODEL, where the meter
    counts them). `off_model` counts only the other threads, so that answers costing more or less in the overload's
    bigger batches do not show as refusals' cost. `of_an_answer`: the server's `off_model` over its whole CPU per
    answer at capacity.

    The figure is a difference, and answers that cost 1% more under overload move it by `drift_ms` (that 1% of
    the answers' CPU off the model's threads, spread over the refusals): with few refusals among many answers it
    says nothing. `resolved`: whether that move stays under 1% of an answer's CPU."""
    if not refused:
        return {}

    def per_refusal(cap: dict, over: dict) -> dict:
        return {k: round(max(0.0, v * max(1, answered) - answered * cap.get(k, 0.0)) / refused, 3)  # as finish divided
                for k, v in over.items()}

    def off_the_model(d: dict) -> dict:
        per_request = d["ms_per_request"]
        return {k: v - d.get(NICER, {}).get(k, 0.0) - (per_request.get(NATIVE_MODEL, 0.0) if k == SERVER else 0.0)
                for k, v in per_request.items() if k != NATIVE_MODEL}

    def server(d: dict) -> float:
        return sum(v for k, v in d.items() if k not in (CLIENT, NATIVE_MODEL))

    per = per_refusal(at_capacity["ms_per_request"], overload["ms_per_request"])
    per["server"] = round(server(per), 3)
    off_model = per_refusal(off_the_model(at_capacity), off_the_model(overload))
    off_model["server"] = round(server(off_model), 3)
    served = server(at_capacity["ms_per_request"])
    drift = 0.01 * server(off_the_model(at_capacity)) * answered / refused
    return {**per, "off_model": off_model, "of_an_answer": round(off_model["server"] / served, 4) if served else None,
            "drift_ms": round(drift, 3), "resolved": bool(served) and drift < 0.01 * served}


class Stress:
    def __init__(self, repository: Path, http_url: str, grpc_url: str, model: str = "", workload: str = "mixed",
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        manifest = measured_model(repository, model)
        self.name = model or manifest.name
        self.task = tasks.of(manifest.model.head)
        self.request = self.task.contract.request  # a request's rows -> the ensemble's inputs
        self.http_url, self.grpc_url, self.timeout_s = http_url, grpc_url, timeout_s
        f = floor.Floor(repository, name=manifest.name)
        rows = corpus.workloads_for(f.chain, self.task, [workload], None, corpus.DEFAULT_SHORT_TOKENS,
                                    corpus.DEFAULT_LONG_TOKENS)[workload].rows
        self.rows = rows[:ROWS]
        self.expected = [check.one_row(f.one(row).outputs) for row in self.rows]
        self.workload = workload

    def capacity(self, meter: CpuMeter | None = None, duration_s: float = CAPACITY_S) -> tuple[float, dict | None]:
        """Answers per second of a closed loop at concurrency 16 (the rate the factor multiplies), and the CPU
        per answer where a `meter` watches the server."""
        bound = load.Bound(duration_s=duration_s, warmup=2 * CAPACITY_CONCURRENCY)
        result = load.measure(lambda: load.TritonGrpc(self.grpc_url, self.name, self.request, self.timeout_s),
                              self.rows, CAPACITY_CONCURRENCY, bound, meter.start if meter else None)
        if result.errors:
            raise TritonizeError(f"the capacity run had {result.errors} errors: {result.error_samples[:1]}")
        cpu = meter.finish(result.completed, result.client_cpu_s, result.wall_s) if meter else None
        return result.completed / result.wall_s, cpu

    def closed_loop(self, clients: int, duration_s: float, meter: CpuMeter | None = None,
                    channels: int = BURST_CHANNELS) -> tuple[ClosedLoop, dict | None]:
        """`clients` that each send their next request as soon as the last is answered or refused, for
        `duration_s` (no request starts after it); the CPU per answer where a `meter` watches the server."""
        with heap_frozen():
            outcome = asyncio.run(self._closed_loop(clients, duration_s, channels, meter))
        cpu = meter.finish(max(1, len(outcome.answered)), outcome.client_cpu_s, outcome.wall_s) if meter else None
        return outcome, cpu

    async def _closed_loop(self, clients: int, duration_s: float, channels: int, meter: CpuMeter | None) -> ClosedLoop:
        from ..client import AsyncTextClient, ServerError, is_unavailable

        outcome = ClosedLoop(clients)
        grpc = [AsyncTextClient(self.grpc_url, self.name, timeout_s=self.timeout_s) for _ in range(channels)]
        for client in grpc:
            await client.is_ready()  # connected before the clock starts
        next_row = [0]

        async def one_client(c: int, deadline: float) -> None:
            while time.perf_counter() < deadline:
                k = next_row[0]
                next_row[0] += 1
                row = self.rows[k % len(self.rows)]
                start = time.perf_counter()
                try:
                    got = await grpc[c % channels].infer(self.request([row]))
                except ServerError as exc:
                    kind = "rejected" if is_unavailable(exc) else "failed"
                    getattr(outcome, kind).append((time.perf_counter() - start) * 1e3)
                    outcome.samples.setdefault(kind, f"{exc.status}: {exc.message[:200]}")
                    continue
                outcome.answered.append((time.perf_counter() - start) * 1e3)
                if not check.compare([self.expected[k % len(self.rows)]], [check.one_row(got)]).passed:
                    outcome.wrong += 1

        if meter:
            meter.start()
        cpu0, start = time.process_time(), time.perf_counter()
        await asyncio.gather(*(one_client(c, start + duration_s) for c in range(clients)))
        outcome.wall_s, outcome.client_cpu_s = time.perf_counter() - start, time.process_time() - cpu0
        for client in grpc:
            await client.close()
        return outcome

    def run(self, rate_rps: float, duration_s: float, seed: int = 0,
            meter: CpuMeter | None = None) -> tuple[Outcome, dict | None]:
        """Requests arriving at `rate_rps` (Poisson) for `duration_s`, each sent as it arrives; the CPU per answer,
        from the first arrival until the last request ended, where a `meter` watches the server."""
        with heap_frozen():
            outcome = asyncio.run(self._open_loop(rate_rps, duration_s, seed, meter))
        cpu = meter.finish(max(1, len(outcome.answered)), outcome.client_cpu_s, outcome.wall_s) if meter else None
        return outcome, cpu

    def burst(self, n: int, channels: int = BURST_CHANNELS) -> dict:
        """n single-row requests released together: how each ended, and the slowest answer."""
        with heap_frozen():
            return asyncio.run(self._burst(n, channels))

    async def _burst(self, n: int, channels: int) -> dict:
        from ..client import AsyncTextClient, ServerError, is_unavailable

        clients = [AsyncTextClient(self.grpc_url, self.name, timeout_s=self.timeout_s) for _ in range(channels)]
        for client in clients:
            await client.is_ready()  # connected before the burst
        gate = asyncio.Event()
        answered: list[float] = []
        refused: list[float] = []
        failed: list[float] = []
        wrong = 0
        samples: dict[str, str] = {}

        async def one(k: int) -> None:
            nonlocal wrong
            row = self.rows[k % len(self.rows)]
            await gate.wait()
            start = time.perf_counter()
            try:
                got = await clients[k % channels].infer(self.request([row]))
            except ServerError as exc:
                kind = "rejected" if is_unavailable(exc) else "failed"
                (refused if is_unavailable(exc) else failed).append((time.perf_counter() - start) * 1e3)
                samples.setdefault(kind, f"{exc.status}: {exc.message[:200]}")
                return
            answered.append((time.perf_counter() - start) * 1e3)
            if not check.compare([self.expected[k % len(self.rows)]], [check.one_row(got)]).passed:
                wrong += 1

        tasks = [asyncio.create_task(one(k)) for k in range(n)]
        await asyncio.sleep(0.1)  # every request waits at the gate
        gate.set()
        await asyncio.gather(*tasks)
        for client in clients:
            await client.close()
        return {"requests": n, "answered": len(answered), "rejected": len(refused), "failed": len(failed),
                "wrong": wrong, "answered_ms": {"p50": _percentile(answered, 50), "max": _percentile(answered, 100)},
                "rejected_ms": {"max": _percentile(refused, 100)}, "samples": samples}

    async def _open_loop(self, rate_rps: float, duration_s: float, seed: int, meter: CpuMeter | None) -> Outcome:
        import aiohttp

        from ..client import AsyncTextClient, ServerError, is_unavailable

        outcome = Outcome(rate_rps, duration_s)
        client = AsyncTextClient(self.grpc_url, self.name, timeout_s=self.timeout_s)
        rng = np.random.default_rng(seed)
        stop = asyncio.Event()

        async def one(k: int) -> None:
            row = self.rows[k % len(self.rows)]
            start = time.perf_counter()
            try:
                got = await client.infer(self.request([row]))
            except ServerError as exc:
                ms = (time.perf_counter() - start) * 1e3
                if is_unavailable(exc):
                    outcome.rejected.append(ms)
                    outcome.samples.setdefault("rejected", exc.message[:200])
                elif "Deadline" in (exc.status or "") or ms >= self.timeout_s * 1e3:
                    outcome.hung += 1
                    outcome.samples.setdefault("hung", exc.message[:200])
                else:
                    outcome.failed.append(ms)
                    outcome.samples.setdefault("failed", f"{exc.status}: {exc.message[:200]}")
                return
            outcome.answered.append((time.perf_counter() - start) * 1e3)
            if not check.compare([self.expected[k % len(self.rows)]], [check.one_row(got)]).passed:
                outcome.wrong += 1

        async def poll(session) -> None:
            url = f"{self.http_url if self.http_url.startswith('http') else 'http://' + self.http_url}/v2/health/ready"
            while not stop.is_set():
                try:
                    async with session.get(url) as resp:
                        ok = resp.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                outcome.ready_polls += ok
                outcome.not_ready_polls += not ok
                try:
                    await asyncio.wait_for(stop.wait(), POLL_S)
                except asyncio.TimeoutError:
                    pass

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            await client.is_ready()  # connect before the clock starts
            poller = asyncio.create_task(poll(session))
            pending: set[asyncio.Task] = set()
            if meter:
                meter.start()
            cpu0, start = time.process_time(), time.perf_counter()
            next_at = start
            k = 0
            while next_at - start < duration_s:
                delay = next_at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                outcome.lag_ms.append(max(0.0, (time.perf_counter() - next_at) * 1e3))
                task = asyncio.create_task(one(k))
                pending.add(task)
                task.add_done_callback(pending.discard)
                k += 1
                next_at += rng.exponential(1.0 / rate_rps)
            outcome.sent = k
            outcome.duration_s = duration_s
            if pending:
                await asyncio.wait(set(pending), timeout=self.timeout_s + 5)
            outcome.wall_s, outcome.client_cpu_s = time.perf_counter() - start, time.process_time() - cpu0
            stop.set()
            await poller
        await client.close()
        return outcome
