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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import tasks
from ..console import err, out
from ..errors import TritonizeError
from ..spec import DEFAULT_VARIANT, VARIANT_CONFIGS
from . import check, corpus, floor, load
from .cpu import NICER, CpuMeter
from .runner import measured_model
from .cli import choice_list, int_list

POLL_S = 0.5
DEFAULT_FACTOR = 4.0
DEFAULT_DURATION_S = 30.0
CAPACITY_S = 5.0
CAPACITY_CONCURRENCY = 16
DEFAULT_TIMEOUT_S = 30.0
ROWS = 64  # distinct rows sent (each answer is checked against the floor's)
MAX_LAG_MS = 20.0  # p99 of how late requests leave, beyond which the generator did not keep the rate
BURST_CHANNELS = 8  # gRPC connections a burst is spread over
BURST_PAUSE_S = 2.0  # between bursts: the queues drain
JSON_NAME = "stress.json"
TABLE_WIDTH = 150


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
    CpuMeter.finish gives it) less `answered` answers at the capacity run's cost per answer, over `refused`.

    A refusal never reaches the graph, whose threads run nicer (cpu.NICER): `normal` counts only the threads
    at normal priority, so that answers costing more or less in the overload's bigger batches do not show as
    refusals' cost. `of_an_answer`: the server's `normal` over its whole CPU per answer at capacity."""
    if not refused:
        return {}

    def per_refusal(cap: dict, over: dict) -> dict:
        return {k: round(max(0.0, v * max(1, answered) - answered * cap.get(k, 0.0)) / refused, 3)  # as finish divided
                for k, v in over.items()}

    def not_nicer(d: dict) -> dict:
        return {k: v - d.get(NICER, {}).get(k, 0.0) for k, v in d["ms_per_request"].items()}

    per = per_refusal(at_capacity["ms_per_request"], overload["ms_per_request"])
    per["server"] = round(sum(v for k, v in per.items() if k != "client"), 3)
    normal = per_refusal(not_nicer(at_capacity), not_nicer(overload))
    normal["server"] = round(sum(v for k, v in normal.items() if k != "client"), 3)
    served = sum(v for k, v in at_capacity["ms_per_request"].items() if k != "client")
    return {**per, "normal": normal, "of_an_answer": round(normal["server"] / served, 4) if served else None}


class Stress:
    def __init__(self, repository: Path, http_url: str, grpc_url: str, model: str = "", workload: str = "mixed",
                 timeout_s: float = DEFAULT_TIMEOUT_S):
        manifest = measured_model(repository, model)
        self.name = model or manifest.name
        self.task = tasks.of(manifest.model.head)
        self.inputs = tuple(t.name for t in self.task.answers.text_inputs)
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
        result = load.measure(lambda: load.TritonGrpc(self.grpc_url, self.name, self.inputs, self.timeout_s),
                              self.rows, CAPACITY_CONCURRENCY, bound, meter.start if meter else None)
        if result.errors:
            raise TritonizeError(f"the capacity run had {result.errors} errors: {result.error_samples[:1]}")
        cpu = meter.finish(result.completed, result.client_cpu_s, result.wall_s) if meter else None
        return result.completed / result.wall_s, cpu

    def closed_loop(self, clients: int, duration_s: float, meter: CpuMeter | None = None,
                    channels: int = BURST_CHANNELS) -> tuple[ClosedLoop, dict | None]:
        """`clients` that each send their next request as soon as the last is answered or refused, for
        `duration_s` (no request starts after it); the CPU per answer where a `meter` watches the server."""
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
                    got = await grpc[c % channels].infer({name: [text] for name, text in zip(self.inputs, row)})
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

    def run(self, rate_rps: float, duration_s: float, seed: int = 0) -> Outcome:
        return asyncio.run(self._open_loop(rate_rps, duration_s, seed))

    def burst(self, n: int, channels: int = BURST_CHANNELS) -> dict:
        """n single-row requests released together: how each ended, and the slowest answer."""
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
                got = await clients[k % channels].infer({name: [text] for name, text in zip(self.inputs, row)})
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

    async def _open_loop(self, rate_rps: float, duration_s: float, seed: int) -> Outcome:
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
                got = await client.infer({name: [text] for name, text in zip(self.inputs, row)})
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
            start = time.perf_counter()
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
            stop.set()
            await poller
        await client.close()
        return outcome


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stress", help="open-loop overload: rejections, latency bounds, readiness and correctness")
    p.add_argument("--repository", "-r", type=Path, default=Path("triton_repo"))
    p.add_argument("--model", default="", help="the model to load, where the repository holds several (default: its "
                   "only model; for a repository of one model, the name the server serves it under, where that differs)")
    p.add_argument("--url", default="127.0.0.1:8000", help="Triton's HTTP endpoint (readiness is polled there)")
    p.add_argument("--grpc-url", default="127.0.0.1:8001")
    p.add_argument("--start-local", action="store_true", help="start a local Triton on free ports for the run")
    p.add_argument("--variant", choices=tuple(VARIANT_CONFIGS), default=DEFAULT_VARIANT,
                   help="what --start-local's server serves: production (config.pbtxt) or fused (default: %(default)s)")
    p.add_argument("--workload", type=choice_list(corpus.WORKLOADS), default=["mixed"], help="short, long or mixed")
    p.add_argument("--factor", type=float, default=DEFAULT_FACTOR, help="arrival rate over the measured capacity (default: %(default)s)")
    p.add_argument("--rate", type=float, default=None, help="arrival rate in requests/s, instead of factor x capacity")
    p.add_argument("--duration", type=float, default=DEFAULT_DURATION_S, help="seconds of open-loop load (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds before a request counts as hung")
    p.add_argument("--burst", type=int_list, default=None, metavar="N[,N...]",
                   help="instead of the open loop: N single-row requests released at the same instant, per N")
    p.add_argument("--clients", type=int, default=None, metavar="N",
                   help="instead of the open loop: N clients in a closed loop for --duration, each sending its next "
                   "request as soon as the last is answered or refused; goodput against the capacity, and on a local "
                   "server the CPU per refusal")
    p.add_argument("--output", "-o", type=Path, default=Path("bench_results"), help=f"folder for {JSON_NAME}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .runner import BenchOptions, triton_endpoints

    if args.duration <= 0 or (args.rate is not None and args.rate <= 0) or args.factor <= 0:
        raise TritonizeError("--duration, --rate and --factor must be positive")
    if args.clients is not None and (args.clients <= 0 or args.burst or args.rate is not None):
        raise TritonizeError("--clients takes a positive count, and neither --burst nor --rate")
    options = BenchOptions(repository=args.repository, http_url=args.url, grpc_url=args.grpc_url,
                           start_local=args.start_local, output=args.output, variant=args.variant)
    with triton_endpoints(options) as (http_url, grpc_url, _, server_pid):
        stress = Stress(args.repository, http_url, grpc_url, args.model, args.workload[0], args.timeout)
        if args.burst:
            return _bursts(stress, args)
        if args.clients:
            return _closed(stress, args, server_pid)
        capacity = None
        if args.rate is None:
            err.print(f"Measuring capacity ({CAPACITY_S:g} s closed loop, concurrency {CAPACITY_CONCURRENCY})...")
            capacity, _ = stress.capacity()
            err.print(f"  capacity {capacity:.1f} req/s")
        rate = args.rate or args.factor * capacity
        err.print(f"Open loop at {rate:.1f} req/s for {args.duration:g} s ({stress.workload} rows)...")
        outcome = stress.run(rate, args.duration)
    document = {"model": stress.name, "task": stress.task.name, "workload": stress.workload,
                "capacity_rps": round(capacity, 1) if capacity else None, "factor": args.factor if capacity else None,
                "timeout_s": args.timeout, **outcome.summary()}
    path = _write(args.output, document)
    print_summary(document)
    err.print(f"[green]✓[/] wrote {path}")
    return 0 if document["wrong"] == 0 and document["hung"] == 0 else 1


def _write(folder: Path, document: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / JSON_NAME
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    return path


def _bursts(stress: Stress, args: argparse.Namespace) -> int:
    stress.burst(CAPACITY_CONCURRENCY)  # warm: every step has run once
    bursts = []
    for n in args.burst:
        time.sleep(BURST_PAUSE_S)
        bursts.append(stress.burst(n))
        b = bursts[-1]
        out.print(f"burst of {n}: {b['answered']} answered (p50 {b['answered_ms']['p50']} ms, slowest "
                  f"{b['answered_ms']['max']} ms), {b['rejected']} refused, {b['failed']} failed, {b['wrong']} wrong")
        for kind, message in b["samples"].items():
            out.print(f"  {kind}: {message}", markup=False)
    document = {"model": stress.name, "task": stress.task.name, "workload": stress.workload, "bursts": bursts}
    err.print(f"[green]✓[/] wrote {_write(args.output, document)}")
    return 0 if all(b["wrong"] == 0 and b["failed"] == 0 for b in bursts) else 1


def _closed(stress: Stress, args: argparse.Namespace, server_pid: int | None) -> int:
    meter = CpuMeter(server_pid) if server_pid else None
    seconds = min(args.duration, 2 * CAPACITY_S)  # long enough for a steady CPU figure per answer
    err.print(f"Measuring capacity ({seconds:g} s closed loop, concurrency {CAPACITY_CONCURRENCY})...")
    capacity, at_capacity = stress.capacity(meter, seconds)
    err.print(f"  capacity {capacity:.1f} req/s")
    err.print(f"Closed loop of {args.clients} clients for {args.duration:g} s ({stress.workload} rows)...")
    outcome, overload = stress.closed_loop(args.clients, args.duration, meter)
    document = {"model": stress.name, "task": stress.task.name, "workload": stress.workload,
                "capacity_rps": round(capacity, 1), "timeout_s": args.timeout, **outcome.summary(capacity)}
    if meter:
        document["cpu"] = {"at_capacity": at_capacity, "overload": overload,
                           "ms_per_refusal": refusal_cpu(at_capacity, overload, len(outcome.answered),
                                                         len(outcome.rejected))}
    print_closed(document)
    err.print(f"[green]✓[/] wrote {_write(args.output, document)}")
    return 0 if document["wrong"] == 0 else 1


def print_closed(d: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = out if out.width >= TABLE_WIDTH else Console(file=out.file, width=TABLE_WIDTH, highlight=False)
    table = Table(title=f"stress: {d['model']} ({d['task']}), {d['workload']} rows, closed loop of {d['clients']} "
                  f"clients", title_justify="left")
    for col in ("capacity req/s", "answered", "answered req/s", "goodput", "rejected", "rejected req/s", "failed",
                "wrong", "answered p50/p99 ms", "rejected p50/p99 ms"):
        table.add_column(col, justify="right")
    a, r = d["answered_ms"], d["rejected_ms"]
    table.add_row(f"{d['capacity_rps']:.1f}", str(d["answered"]), f"{d['answered_rps']:.1f}", f"{d['goodput']:.2f}",
                  str(d["rejected"]), f"{d['rejected_rps']:.1f}", str(d["failed"]), str(d["wrong"]),
                  f"{a['p50']}/{a['p99']}", f"{r['p50']}/{r['p99']}")
    console.print(table)
    if "cpu" in d:
        c = d["cpu"]
        labels = sorted(set(c["at_capacity"]["ms_per_request"]) | set(c["overload"]["ms_per_request"]),
                        key=lambda k: (k == "client", k))
        cpu = Table(title="CPU ms by process (per refusal: the overload's CPU less its answers at the capacity "
                    "run's cost, over the refusals; normal priority: without the graph's nicer threads)",
                    title_justify="left")
        for col in ("process", "per answer at capacity", "per answer under overload", "per refusal",
                    "per refusal, normal priority"):
            cpu.add_column(col, justify="right")
        per = c["ms_per_refusal"]
        for k in labels:
            cpu.add_row(k, *(str(c[part]["ms_per_request"].get(k, "-")) for part in ("at_capacity", "overload")),
                        str(per.get(k, "-")), str(per.get("normal", {}).get(k, "-")))
        if per:
            cpu.add_row("server (all but client)", "", "", str(per["server"]), str(per["normal"]["server"]))
        console.print(cpu)
        if per.get("of_an_answer") is not None:
            out.print(f"a refusal costs the server {per['normal']['server']} ms at normal priority: "
                      f"{100 * per['of_an_answer']:.1f}% of an answer's CPU at capacity")
    for kind, message in d["samples"].items():
        out.print(f"  {kind}: {message}", markup=False)


def print_summary(d: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"stress: {d['model']} ({d['task']}), {d['workload']} rows, open loop", title_justify="left")
    for col in ("offered req/s", "answered", "answered req/s", "rejected", "failed", "hung", "wrong",
                "answered p50/p99 ms", "rejected p50/p99 ms", "ready polls"):
        table.add_column(col, justify="right")
    a, r = d["answered_ms"], d["rejected_ms"]
    table.add_row(f"{d['offered_rps']:.1f}", str(d["answered"]), f"{d['answered_rps']:.1f}", str(d["rejected"]),
                  str(d["failed"]), str(d["hung"]), str(d["wrong"]), f"{a['p50']}/{a['p99']}", f"{r['p50']}/{r['p99']}",
                  f"{d['ready_polls']}/{d['ready_polls'] + d['not_ready_polls']}")
    console = out if out.width >= TABLE_WIDTH else Console(file=out.file, width=TABLE_WIDTH, highlight=False)
    console.print(table)
    for kind, message in d["samples"].items():
        out.print(f"  {kind}: {message}", markup=False)
    if not d["generator_kept_up"]:
        out.print(f"[yellow]the load generator fell behind (p99 {d['generator_lag_ms']['p99']} ms late): it offered less "
                  "than the rate and its latencies include its own queueing; lower --rate or --factor[/]")
