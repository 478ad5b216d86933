"""`tritonize stress`'s flags, its three runs (open loop, bursts, a closed loop of many clients; stress.py measures
them), the document it writes and the tables it prints."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..console import err, out
from ..errors import TritonizeError
from ..spec import DEFAULT_VARIANT, VARIANT_CONFIGS
from . import corpus
from .cli import choice_list, int_list
from .cpu import CpuMeter
from .measured import measured_model, native_model_threads
from .stress import CAPACITY_CONCURRENCY, CAPACITY_S, DEFAULT_TIMEOUT_S, Stress, refusal_cpu

DEFAULT_FACTOR = 4.0
DEFAULT_DURATION_S = 30.0
BURST_PAUSE_S = 2.0  # between bursts: the queues drain
JSON_NAME = "stress.json"
TABLE_WIDTH = 150


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
    p.add_argument("--workload", type=choice_list(corpus.TEXT_WORKLOADS), default=["mixed"], help="short, long or mixed")
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
    from .measured import triton_endpoints
    from .options import BenchOptions

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
        capacity, at_capacity = None, None
        meter = _meter(server_pid, args) if args.rate is None else None
        if args.rate is None:
            err.print(f"Measuring capacity ({CAPACITY_S:g} s closed loop, concurrency {CAPACITY_CONCURRENCY})...")
            capacity, at_capacity = stress.capacity(meter)
            err.print(f"  capacity {capacity:.1f} req/s")
        rate = args.rate or args.factor * capacity
        err.print(f"Open loop at {rate:.1f} req/s for {args.duration:g} s ({stress.workload} rows)...")
        outcome, overload = stress.run(rate, args.duration, meter=meter)
    document = {"model": stress.name, "task": stress.task.name, "workload": stress.workload,
                "capacity_rps": round(capacity, 1) if capacity else None, "factor": args.factor if capacity else None,
                "timeout_s": args.timeout, **outcome.summary()}
    if at_capacity and overload:
        document["cpu"] = cpu_document(at_capacity, overload, len(outcome.answered), len(outcome.rejected))
    path = _write(args.output, document)
    print_summary(document)
    print_cpu(document)
    err.print(f"[green]✓[/] wrote {path}")
    return 0 if document["wrong"] == 0 and document["hung"] == 0 else 1


def _meter(server_pid: int | None, args: argparse.Namespace) -> CpuMeter | None:
    """What watches a local server's processes, the native model's threads told apart; None for a remote one."""
    if not server_pid:
        return None
    threads = native_model_threads(args.repository, measured_model(args.repository, args.model), args.variant)
    return CpuMeter(server_pid, model_threads=threads)


def cpu_document(at_capacity: dict, overload: dict, answered: int, refused: int) -> dict:
    """The server's CPU by process at capacity and under the overload, and what a refusal cost (refusal_cpu)."""
    return {"at_capacity": at_capacity, "overload": overload,
            "ms_per_refusal": refusal_cpu(at_capacity, overload, answered, refused)}


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
    meter = _meter(server_pid, args)
    seconds = min(args.duration, 2 * CAPACITY_S)  # long enough for a steady CPU figure per answer
    err.print(f"Measuring capacity ({seconds:g} s closed loop, concurrency {CAPACITY_CONCURRENCY})...")
    capacity, at_capacity = stress.capacity(meter, seconds)
    err.print(f"  capacity {capacity:.1f} req/s")
    err.print(f"Closed loop of {args.clients} clients for {args.duration:g} s ({stress.workload} rows)...")
    outcome, overload = stress.closed_loop(args.clients, args.duration, meter)
    document = {"model": stress.name, "task": stress.task.name, "workload": stress.workload,
                "capacity_rps": round(capacity, 1), "timeout_s": args.timeout, **outcome.summary(capacity)}
    if meter:
        document["cpu"] = cpu_document(at_capacity, overload, len(outcome.answered), len(outcome.rejected))
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
    print_cpu(d)
    for kind, message in d["samples"].items():
        out.print(f"  {kind}: {message}", markup=False)


def print_cpu(d: dict) -> None:
    """The CPU by process of a run the server's group was watched in: per answer, and what a refusal costs."""
    from rich.console import Console
    from rich.table import Table

    console = out if out.width >= TABLE_WIDTH else Console(file=out.file, width=TABLE_WIDTH, highlight=False)
    if "cpu" in d:
        c = d["cpu"]
        labels = sorted(set(c["at_capacity"]["ms_per_request"]) | set(c["overload"]["ms_per_request"]),
                        key=lambda k: (k == "client", k))
        cpu = Table(title="CPU ms by process (per refusal: the overload's CPU less its answers at the capacity "
                    "run's cost, over the refusals; off the model: without the model's own threads)",
                    title_justify="left")
        for col in ("process", "per answer at capacity", "per answer under overload", "per refusal",
                    "per refusal, off the model"):
            cpu.add_column(col, justify="right")
        per = c["ms_per_refusal"]
        for k in labels:
            cpu.add_row(k, *(str(c[part]["ms_per_request"].get(k, "-")) for part in ("at_capacity", "overload")),
                        str(per.get(k, "-")), str(per.get("off_model", {}).get(k, "-")))
        if per:
            cpu.add_row("server (all but client)", "", "", str(per["server"]), str(per["off_model"]["server"]))
        console.print(cpu)
        if per and not per.get("resolved"):
            out.print(f"{d['rejected']} refusals against {d['answered']} answers: too few to tell their CPU from the "
                      f"answers' (answers costing 1% more under overload move the figure by {per['drift_ms']} ms "
                      "a refusal)")
        elif per.get("of_an_answer") is not None:
            out.print(f"a refusal costs the server {per['off_model']['server']} ms off the model's threads: "
                      f"{100 * per['of_an_answer']:.1f}% of an answer's CPU at capacity")


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
