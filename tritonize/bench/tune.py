"""`tritonize tune`: try a small grid of batching settings on the local server, keep the best.

Each point is written (with `repository.reconfigure`) into a shadow copy of
the repository whose model files are links to the real ones, served by a
local Triton on free ports, and measured over gRPC. The best point by
throughput relative to the start (geometric mean over workloads and
concurrencies), among those whose p99 stays within the budget at every
measured concurrency, is written back into the real repository. The starting configuration is measured first, and
again last where there are other points; a point must beat the better of its two measurements by 3% (the noise
of a short run) to replace it. The chosen point's throughput at the highest
concurrency (the slowest workload's) is written too, as the capacity the queue bounds follow
(`spec.default_queue_size`).

In a repository of several models, `--model NAME` says which is tuned; the shadow holds that model's
folders only, so each point loads and measures it alone.

    tritonize tune --repository triton_repo --p99-budget-ms 250
    tritonize tune --repository triton_repo --grid max_queue_delay_us=0,2000 model_instances=1,2 buckets=16:64:256
    tritonize tune --repository triton_repo --grid gather_us=0,1000,2000,4000 --workloads short --concurrency 1,4,16

With `--api-workers 1,2,4` (an embedder), the HTTP API is then measured in front of the chosen configuration with
each count of processes (`tritonize api --workers`), one text a request, and the best count by the same rule
(throughput over every workload and concurrency, p99 within the budget, 3% over the count the repository had) is
written as the repository's `api_workers`, which `tritonize api` starts where no flag or $TRITONIZE_API_WORKERS
says: the API's processes follow what this machine measured.
"""

from __future__ import annotations

import argparse
import itertools
import math
import json
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..console import err, out
from ..errors import TritonizeError
from ..manifest import read_manifest
from ..runtime.base import ServerOptions
from ..runtime.machine import free_ports
from ..spec.options import Overrides
from . import corpus, load, server_counters
from .cli import add_target_arguments, int_list
from .runner import step_models
from .shadow import shadow_repository

# What reconfigure may change that moves speed (the text bounds decide answers, not speed).
GRID_KEYS = ("max_batch_size", "max_queue_delay_us", "max_queue_size", "tokenizer_instances", "model_instances", "gather_us",
             "buckets")
API_WORKERS = "api_workers"  # the API's processes (--api-workers), measured after the grid
DEFAULT_GRID = {"max_queue_delay_us": [0, 500, 2000], "model_instances": [1, 2]}
DEFAULT_CONCURRENCY = [1, 16]
DEFAULT_WORKLOADS = ["mixed"]
DEFAULT_DURATION_S = 5.0
DEFAULT_BUDGET_SLACK = 1.25  # with no budget given: the starting p99, plus a quarter


@dataclass
class Point:
    """One configuration and what it measured."""

    changes: dict
    runs: list[dict] = field(default_factory=list)
    error: str = ""

    def label(self) -> str:
        return " ".join(f"{k}={_fmt(v)}" for k, v in self.changes.items())

    def worst_p99(self) -> float:
        return max((r["latency_ms"]["p99"] for r in self.runs), default=float("inf"))

    def run_at(self, workload: str, concurrency: int) -> dict | None:
        return next((r for r in self.runs if r["workload"] == workload and r["concurrency"] == concurrency), None)

    def rps(self) -> dict[tuple[str, int], float]:
        return {(r["workload"], r["concurrency"]): r["throughput_rps"] for r in self.runs}

    def ok(self) -> bool:
        return not self.error and self.runs and all(r["errors"] == 0 for r in self.runs)


def _fmt(value) -> str:
    return ":".join(str(v) for v in value) if isinstance(value, list) else str(value)


def parse_grid(items: list[str] | None) -> dict[str, list]:
    """KEY=V1,V2 items; buckets values are colon-separated lengths (16:32:64)."""
    if not items:
        return dict(DEFAULT_GRID)
    grid: dict[str, list] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or key not in GRID_KEYS or not values.strip():
            raise TritonizeError(f"bad --grid item {item!r}", hint=f"use KEY=V1,V2 with KEY one of {', '.join(GRID_KEYS)}")
        try:
            if key == "buckets":
                grid[key] = [[int(b) for b in v.split(":") if b] for v in values.split(",") if v]
            else:
                grid[key] = [int(v) for v in values.split(",") if v.strip()]
        except ValueError:
            raise TritonizeError(f"bad --grid values in {item!r}", hint="integers; buckets as 16:32:64") from None
    return grid


def grid_points(grid: dict[str, list], current: dict) -> list[dict]:
    """The starting configuration first, then every other combination."""
    keys = list(grid)
    start = {k: current.get(k) for k in keys}
    points = [start]
    for combo in itertools.product(*(grid[k] for k in keys)):
        changes = dict(zip(keys, combo))
        if changes != start:
            points.append(changes)
    return points


class Tuner:
    def __init__(self, args: argparse.Namespace):
        from .. import chain, tasks

        self.repo = Path(args.repository)
        manifest = read_manifest(self.repo, args.model or None)
        self.manifest = manifest
        self.task = tasks.of(manifest.model.head)
        self.name = manifest.name
        self.grid = parse_grid(args.grid)
        self.points = [Point(c) for c in grid_points(self.grid, manifest.options.to_dict())]
        self.again = Point(dict(self.points[0].changes))  # the start, measured again after every other point
        self.concurrency = sorted(args.concurrency)
        duration = None if args.requests else (args.duration or DEFAULT_DURATION_S)
        self.bound = lambda c: load.Bound(requests=args.requests, duration_s=duration,
                                          warmup=args.warmup if args.warmup is not None else max(10, 2 * c))
        self.workloads = corpus.workloads_for(
            chain.in_process(self.repo, intra_op_threads=1, shards=0, name=self.name), self.task, args.workloads, args.corpus,
            args.short_tokens, args.long_tokens,
        )
        self.timeout_s = args.timeout
        self.budget = args.p99_budget_ms
        self.output = Path(args.output)
        self.stopping: list[threading.Thread] = []  # the servers of measured points, exiting
        self.api_workers = list(getattr(args, "api_workers", None) or ())
        if self.api_workers and not self.task.contract.bench_as_embeddings:
            raise TritonizeError(f"--api-workers measures the API's /v1/embeddings; this repository's task is "
                                 f"{self.task.name}", hint="leave --api-workers out")
        if self.api_workers:  # the count the repository has, measured first (the start every count is scored by)
            recorded = manifest.options.api_workers or 1
            counts = [recorded, *(n for n in dict.fromkeys(self.api_workers) if n != recorded)]
            self.api_points = [Point({API_WORKERS: n}) for n in counts]
        else:
            self.api_points = []

    def measure(self, point: Point, workdir: Path, changes: dict | None = None) -> None:
        """One point on a server of its own: Triton's configuration (`changes`, else the point's) over gRPC, or,
        for a point of API_WORKERS, that many API processes in front of it over /v1/embeddings."""
        from ..api.child import ApiProcess
        from ..repository import reconfigure
        from ..runtime.local import LocalRuntime

        shadow = shadow_repository(self.repo, workdir / "repo", self.name)
        workers = point.changes.get(API_WORKERS)
        reconfigure(shadow, Overrides.of(point.changes if changes is None else changes), self.name)
        http, grpc, metrics = free_ports(3)
        options = ServerOptions(repository=shadow, http_port=http, grpc_port=grpc, metrics_port=metrics,
                                run_dir=workdir / "run")
        names = step_models(shadow, self.name)
        runtime = LocalRuntime(options, quiet=True)
        endpoints = runtime.up()
        api = None
        try:
            make = lambda request: load.TritonGrpc(endpoints.grpc, self.name, request, self.timeout_s)  # noqa: E731
            if workers is not None:
                (port,) = free_ports(1)
                api = ApiProcess(shadow, endpoints.grpc, endpoints.http, port=port, workers=workers,
                                 log_file=workdir / "api.log")
                url = api.start() + "/v1"
                make = lambda request: load.OpenAIEmbeddings(url, self.name, self.timeout_s)  # noqa: E731
            snaps = server_counters.Snapshots(endpoints.http, list(names.values()))
            served = server_counters.ServedCounters(endpoints.metrics, list(names.values()))
            for wname, w in self.workloads.items():
                request = corpus.request_of(self.task.contract, w)
                for c in self.concurrency:
                    result = load.measure(lambda: make(request), w.rows, c, self.bound(c),
                                          lambda: (snaps.start(), served.start()))
                    model = snaps.finish(expected=result.completed)[names["model"]]
                    # The fused step's graph runs take what its executions handed over: their batch, as bench's.
                    batch = served.finish().get(server_counters.GRAPH_BATCH) or model.avg_batch
                    point.runs.append({"workload": wname, **result.summary(), "avg_batch": round(batch, 2)})
        finally:
            if api is not None:
                api.stop()
            # Triton takes 2-3 s to exit, idle for most of them: the next point's server starts meanwhile,
            # on ports of its own, and is measured after its warm-up.
            stopping = threading.Thread(target=runtime.down, name=f"stop {point.label()}", daemon=True)
            stopping.start()
            self.stopping.append(stopping)

    def run(self) -> dict:
        # The start is measured first and, where there is anything to compare, again last: a point must beat
        # the better of the two, so a start measured while the machine was busy does not lose to noise.
        order = self.points + ([self.again] if len(self.points) > 1 else [])
        twice = " (the first measured again last)" if len(order) > len(self.points) else ""
        err.print(f"Tuning {self.repo}: {len(self.points)} configurations{twice}, workloads {', '.join(self.workloads)}, "
                  f"concurrency {','.join(map(str, self.concurrency))}")
        self.measure_all(order, first_fatal=True)
        before = self.points[0]
        budget = self.budget if self.budget is not None else round(before.worst_p99() * DEFAULT_BUDGET_SLACK, 1)
        best = self.choose(budget)
        api = self.run_api(best.changes) if self.api_points else {}
        return {**api, "budget_p99_ms": budget, "capacity_rps": self.capacity(best), "budget_given": self.budget is not None, "grid": self.grid,
                "concurrency": self.concurrency, "workloads": list(self.workloads),
                "points": [{"changes": p.changes, "runs": p.runs, "error": p.error} for p in self.points],
                "start_again": {"runs": self.again.runs, "error": self.again.error},
                "before": before.changes, "chosen": best.changes, "changed": best is not before}

    def measure_all(self, points: list[Point], changes: dict | None = None, first_fatal: bool = False) -> None:
        """Each point in turn (on Triton's configuration `changes`, where given), a line of progress each; a point
        that fails keeps its error, the first one's is raised where `first_fatal`."""
        with tempfile.TemporaryDirectory(prefix="tritonize-tune-") as tmp:
            try:
                for i, point in enumerate(points):
                    try:
                        self.measure(point, Path(tmp) / str(i), changes)
                    except TritonizeError as exc:
                        point.error = exc.message.splitlines()[0]
                        if i == 0 and first_fatal:
                            raise
                    err.print(f"  [{i + 1}/{len(points)}] {point.label()}: " + (f"[red]{point.error}[/]" if point.error else
                              ", ".join(f"{r['workload']} c={r['concurrency']} {r['throughput_rps']:.1f} req/s p99 {r['latency_ms']['p99']:.1f} ms"
                                        for r in point.runs)))
            finally:
                for stopping in self.stopping:  # every server gone before its folder is
                    stopping.join()

    def run_api(self, chosen: dict) -> dict:
        """The API in front of the chosen configuration with each count of processes; the best count (by `pick`,
        against the count the repository had, measured first)."""
        err.print(f"The API in front of it: {len(self.api_points)} counts of processes "
                  f"({', '.join(str(p.changes[API_WORKERS]) for p in self.api_points)})")
        self.measure_all(self.api_points, changes=chosen)
        start = self.api_points[0]
        budget = self.budget if self.budget is not None else round(start.worst_p99() * DEFAULT_BUDGET_SLACK, 1)
        best = pick(self.api_points, start.rps(), budget)
        return {"api_budget_p99_ms": budget, "api_points": [{"workers": p.changes[API_WORKERS], "runs": p.runs,
                                                             "error": p.error} for p in self.api_points],
                "api_workers_before": start.changes[API_WORKERS], "api_workers": best.changes[API_WORKERS]}

    def capacity(self, point: Point) -> float | None:
        """Requests/s at the highest measured concurrency, of the slowest workload: what a full queue drains."""
        top = max(self.concurrency)
        rates = [r["throughput_rps"] for r in point.runs if r["concurrency"] == top]
        return round(min(rates), 1) if rates and min(rates) > 0 else None

    def score(self, point: Point) -> float:
        return score(point, self.start_rps())

    def start_runs(self) -> dict[tuple[str, int], dict]:
        """The start's better measurement of each (workload, concurrency): its first, or its second (where that
        ran without errors) where the second was faster."""
        best: dict[tuple[str, int], dict] = {}
        for point in (self.points[0], *([self.again] if self.again.ok() else [])):
            for r in point.runs:
                key = (r["workload"], r["concurrency"])
                if key not in best or r["throughput_rps"] > best[key]["throughput_rps"]:
                    best[key] = r
        return best

    def start_rps(self) -> dict[tuple[str, int], float]:
        return {k: r["throughput_rps"] for k, r in self.start_runs().items()}

    def choose(self, budget: float) -> Point:
        return pick(self.points, self.start_rps(), budget)


def score(point: Point, base: dict[tuple[str, int], float]) -> float:
    """Geometric mean of throughput over every (workload, concurrency), relative to the start's (`base`).

    At concurrency 1 throughput is the inverse of latency, so the score
    rewards a faster single request as much as a larger batch under load.
    """
    mine = point.rps()
    ratios = [mine[k] / base[k] for k in base if base[k] > 0 and mine.get(k, 0) > 0]
    if not ratios or len(ratios) < len(base):
        return 0.0
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def pick(points: list[Point], base: dict[tuple[str, int], float], budget: float) -> Point:
    """The best of `points` whose p99 stays within the budget; the first (the start) unless another beats it by
    3%, the noise of a short run."""
    feasible = [p for p in points if p.ok() and p.worst_p99() <= budget]
    if not feasible:
        err.print(f"[yellow]nothing measured kept p99 within {budget:g} ms; keeping the current one[/]")
        return points[0]
    best = max(feasible, key=lambda p: (round(score(p, base), 3), -p.worst_p99()))
    return best if score(best, base) >= 1.03 or best is points[0] else points[0]


def print_summary(tuner: Tuner, result: dict, console: Console) -> None:
    budget = result["budget_p99_ms"]
    table = Table(title=f"tune: p99 budget {budget:g} ms ({'given' if result['budget_given'] else 'starting p99 + 25%'}); "
                        "score = geometric mean of throughput relative to the start (its better measurement of each cell)",
                  title_justify="left")
    table.add_column("configuration", no_wrap=True)
    for w in tuner.workloads:
        for c in tuner.concurrency:
            table.add_column(f"{w} c={c}\nreq/s | p99 ms | batch", justify="right")
    table.add_column("score", justify="right")
    table.add_column("")
    again = [tuner.again] if tuner.again.runs or tuner.again.error else []
    for i, p in enumerate(tuner.points + again):
        cells = []
        for w in tuner.workloads:
            for c in tuner.concurrency:
                r = p.run_at(w, c)
                cells.append(f"{r['throughput_rps']:.1f} | {r['latency_ms']['p99']:.1f} | {r['avg_batch']:.1f}" if r else "-")
        mark = []
        if p is tuner.again:
            mark.append("before, again")
        elif i == 0:
            mark.append("before")
        if p.changes == result["chosen"] and p is not tuner.again:
            mark.append("[green]chosen[/]")
        if p.error:
            mark.append(f"[red]{p.error[:40]}[/]")
        elif p.worst_p99() > budget:
            mark.append("[yellow]over budget[/]")
        table.add_row(p.label(), *cells, f"{tuner.score(p):.2f}" if p.runs else "-", " ".join(mark))
    console.print(table)
    chosen = next(p for p in tuner.points if p.changes == result["chosen"])
    for (w, c), b in tuner.start_runs().items():  # the start's better measurement of each cell, as scored
        a = chosen.run_at(w, c) or b
        console.print(f"  {w} c={c}: {b['throughput_rps']:.1f} -> {a['throughput_rps']:.1f} req/s, "
                      f"p50 {b['latency_ms']['p50']:.1f} -> {a['latency_ms']['p50']:.1f} ms, "
                      f"p99 {b['latency_ms']['p99']:.1f} -> {a['latency_ms']['p99']:.1f} ms")
    if tuner.api_points:
        print_api(tuner, result, console)


def print_api(tuner: Tuner, result: dict, console: Console) -> None:
    table = Table(title=f"the API's processes in front of it (/v1/embeddings, one text a request): p99 budget "
                        f"{result['api_budget_p99_ms']:g} ms; score against {result['api_workers_before']}",
                  title_justify="left")
    table.add_column("workers", justify="right")
    for w in tuner.workloads:
        for c in tuner.concurrency:
            table.add_column(f"{w} c={c}\nreq/s | p99 ms", justify="right")
    table.add_column("score", justify="right")
    table.add_column("")
    base = tuner.api_points[0].rps()
    for i, p in enumerate(tuner.api_points):
        cells = []
        for w in tuner.workloads:
            for c in tuner.concurrency:
                r = p.run_at(w, c)
                cells.append(f"{r['throughput_rps']:.1f} | {r['latency_ms']['p99']:.1f}" if r else "-")
        mark = (["before"] if i == 0 else []) + (["[green]chosen[/]"] if p.changes[API_WORKERS] == result[API_WORKERS] else [])
        if p.error:
            mark.append(f"[red]{p.error[:40]}[/]")
        elif p.worst_p99() > result["api_budget_p99_ms"]:
            mark.append("[yellow]over budget[/]")
        table.add_row(str(p.changes[API_WORKERS]), *cells, f"{score(p, base):.2f}" if p.runs else "-", " ".join(mark))
    console.print(table)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("tune", help="try batching settings on the local server and keep the best")
    add_target_arguments(p, DEFAULT_DURATION_S, DEFAULT_WORKLOADS)
    p.add_argument("--p99-budget-ms", type=float, default=None,
                   help="p99 latency allowed at every measured concurrency (default: the starting p99 + 25%%)")
    p.add_argument("--grid", nargs="+", default=None, metavar="KEY=V1,V2",
                   help=f"values to try, keys: {', '.join(GRID_KEYS)} (default: max_queue_delay_us=0,500,2000 model_instances=1,2)")
    p.add_argument("--concurrency", type=int_list, default=list(DEFAULT_CONCURRENCY), help="comma-separated (default: 1,16)")
    p.add_argument("--api-workers", type=int_list, default=None, metavar="N1,N2",
                   help="then measure the HTTP API (an embedder's /v1/embeddings) in front of the chosen configuration "
                        "with each count of processes, and write the best as the repository's api_workers, what "
                        "`tritonize api` starts where no --workers or $TRITONIZE_API_WORKERS says (default: not measured)")
    p.add_argument("--output", "-o", type=Path, default=Path("bench_results"), help="folder for tune.json")
    p.add_argument("--dry-run", action="store_true", help="measure and report, but leave the repository as it is")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..repository import reconfigure

    if args.duration is None and args.requests is None:
        args.duration = DEFAULT_DURATION_S
    tuner = Tuner(args)
    result = tuner.run()
    print_summary(tuner, result, out if out.width >= 120 else Console(file=out.file, width=160, highlight=False))
    if result["changed"] and not args.dry_run:
        err.print(f"[green]✓[/] wrote {Point(result['chosen']).label()} into {tuner.repo} "
                  f"(was {Point(result['before']).label()}); restart the server to use it")
    elif result["changed"]:
        err.print(f"dry run: would write {Point(result['chosen']).label()} into {tuner.repo}")
    else:
        err.print(f"the current configuration ({Point(result['before']).label()}) stays")
    if API_WORKERS in result:
        moved = result[API_WORKERS] != result["api_workers_before"]
        err.print(("dry run: would write " if args.dry_run else "") + f"the API's processes: {result[API_WORKERS]}"
                  + (f" (was {result['api_workers_before']})" if moved else " (as before)"))
    if not args.dry_run:
        capacity = {"capacity_rps": result["capacity_rps"]} if result["capacity_rps"] else {}
        workers = {API_WORKERS: result[API_WORKERS]} if API_WORKERS in result else {}
        repo = reconfigure(tuner.repo, Overrides.of({**(result["chosen"] if result["changed"] else {}), **capacity,
                                                     **workers}), tuner.name)
        if capacity:
            err.print(f"capacity {result['capacity_rps']:g} req/s written: each step's queue holds "
                      f"{repo.model_step.max_queue_size} requests")
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "tune.json").write_text(json.dumps(result, indent=2) + "\n")
    return 0
