"""One benchmark run: Triton (gRPC, HTTP), the baselines and the floor, same model, same texts.

Systems are measured one after another, never at the same time, so each has
the whole machine (shared only with the load generator). A server started
here is stopped before the next system starts. The floor's batch-1 latency
is taken in two halves around Triton's concurrency-1 run of the same
workload (the server idle meanwhile), so a drifting machine cannot decide
a millisecond-sized comparison.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..console import err
from ..errors import TritonizeError
from ..manifest import read_manifest
from ..runtime.base import Endpoints, ServerOptions
from ..runtime.process import free_ports
from ..spec import Overrides, repo_paths
from . import baselines, corpus, cpu, floor, load, stats
from .targets import evaluate

TRITON_LABELS = {"grpc": "Triton gRPC", "http": "Triton HTTP"}
SHARED_CPU_NOTE = (
    "The load generator runs on the same machine and shares its cores with the system under test; "
    "client_cpu_pct is how much of one core it used."
)


@dataclass
class BenchOptions:
    """Everything a run needs; the CLI and tune build one."""

    repository: Path
    model: str = ""  # the ensemble's name; default: tritonize.yaml's name
    http_url: str = "127.0.0.1:8000"
    grpc_url: str = "127.0.0.1:8001"
    start_local: bool = False
    concurrency: list[int] = field(default_factory=lambda: [1, 4, 16])
    workloads: list[str] = field(default_factory=lambda: list(corpus.WORKLOADS))
    protocols: list[str] = field(default_factory=lambda: ["grpc", "http"])
    baselines: list[str] = field(default_factory=lambda: ["doc", "doc-batched", "floor"])
    duration_s: float | None = 10.0
    requests: int | None = None
    warmup: int | None = None  # default: 2 x concurrency, at least 10
    output: Path = Path("bench_results")
    source_model: str | None = None  # the folder the baselines load; default: tritonize.yaml's model
    corpus_file: Path | None = None
    short_tokens: int = corpus.DEFAULT_SHORT_TOKENS
    long_tokens: int = corpus.DEFAULT_LONG_TOKENS
    timeout_s: float = load.DEFAULT_TIMEOUT_S
    quiet: bool = False

    def bound(self, concurrency: int) -> load.Bound:
        warmup = self.warmup if self.warmup is not None else max(10, 2 * concurrency)
        return load.Bound(requests=self.requests, duration_s=None if self.requests else self.duration_s, warmup=warmup)


@contextlib.contextmanager
def triton_endpoints(options: BenchOptions) -> Iterator[tuple[str, str, int | None]]:
    """(http_url, grpc_url, server PID or None) of the server to measure; starts a local one on free ports if asked."""
    if not options.start_local:
        yield options.http_url, options.grpc_url, None
        return
    from ..runtime.local import LocalRuntime

    http, grpc, metrics = free_ports(3)
    server = ServerOptions(
        repository=Path(options.repository),
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        run_dir=Path(options.output) / ".run",
    )
    runtime = LocalRuntime(server, quiet=options.quiet)
    with runtime as endpoints:
        endpoints: Endpoints
        yield endpoints.http, endpoints.grpc, runtime.server_pid


class Bench:
    """Runs the systems in turn and collects one JSON-able document."""

    def __init__(self, options: BenchOptions):
        self.o = options
        repo = Path(options.repository)
        manifest = read_manifest(repo)
        corpus.require_single_text(manifest)
        self.name = options.model or manifest.name
        self.manifest = manifest
        self.floor = floor.Floor(repo)
        self.workloads = corpus.workloads_for(
            self.floor.encoder, options.workloads, options.corpus_file, options.short_tokens, options.long_tokens
        )
        paths = repo_paths(repo, self.name)
        self.step_names = [self.name, paths["tokenizer"].name, paths["model"].name]
        self.runs: list[dict] = []
        # The floor's batch-1 latencies, taken right around Triton's concurrency-1 run of each workload.
        self.batch1: dict[str, list[float]] = {}

    def say(self, message: str) -> None:
        if not self.o.quiet:
            err.print(message)

    # -- systems -----------------------------------------------------------
    def _record(self, system: str, label: str, workload: str, result: load.LoadResult, extra: dict) -> dict:
        run = {"system": system, "label": label, "workload": workload, **result.summary(), **extra}
        self.runs.append(run)
        lat = run["latency_ms"]
        self.say(
            f"  {label:<24} {workload:<5} c={result.concurrency:<3} p50 {lat['p50']:7.1f} ms  p99 {lat['p99']:7.1f} ms"
            f"  {run['throughput_rps']:6.1f} req/s" + (f"  [red]errors {run['errors']}[/]" if run["errors"] else "")
        )
        return run

    def measure_triton(self) -> None:
        with triton_endpoints(self.o) as (http_url, grpc_url, server_pid):
            meter = cpu.CpuMeter(server_pid) if server_pid else None
            try:
                stats.fetch(http_url)
                snaps: stats.Snapshots | None = stats.Snapshots(http_url, self.step_names)
            except OSError:
                self.say(f"[yellow]no statistics at {http_url}: per-step figures are left out[/]")
                snaps = None
            for protocol in self.o.protocols:
                label = TRITON_LABELS[protocol]
                if protocol == "grpc":
                    make = lambda: load.TritonGrpc(grpc_url, self.name, self.o.timeout_s)  # noqa: E731
                else:
                    make = lambda: load.TritonHttp(http_url, self.name, self.o.timeout_s)  # noqa: E731
                for wname, w in self.workloads.items():
                    for c in self.o.concurrency:
                        pair = c == 1 and protocol == self.o.protocols[0] and "floor" in self.o.baselines
                        if pair:
                            self._floor_batch1(wname, w)
                        starts = [f for f in (snaps.start if snaps else None, meter.start if meter else None) if f]
                        result = load.measure(make, w.texts, c, self.o.bound(c), lambda: [f() for f in starts])
                        if pair:
                            self._floor_batch1(wname, w)
                        extra = self._triton_extra(snaps, result, w) if snaps else {}
                        if meter:
                            extra["cpu"] = meter.finish(result.completed, result.client_cpu_s, result.wall_s)
                        self._record(f"triton-{protocol}", label, wname, result, extra)

    def _floor_batch1(self, wname: str, w: corpus.Workload) -> None:
        """Half the floor's batch-1 measurement: one half just before Triton's concurrency-1 run, one just after.

        Latency differences of a millisecond are the targets here, and a shared
        machine drifts by that much within minutes: measured side by side, both
        systems see the same machine.
        """
        requests = self.o.requests // 2 if self.o.requests else None
        duration = self.o.duration_s / 2 if not self.o.requests and self.o.duration_s else None
        lat = self.floor.batch1_latency(w.texts, max(1, requests) if requests is not None else None, duration)
        self.batch1.setdefault(wname, []).extend(lat)

    def _triton_extra(self, snaps: stats.Snapshots, result: load.LoadResult, w: corpus.Workload) -> dict:
        deltas = snaps.finish(expected=result.completed)
        ensemble, tok, model = (deltas[n] for n in self.step_names)
        client_mean = result.summary()["latency_ms"]["mean"]
        return {
            "steps": {"ensemble": ensemble.to_dict(), "tokenizer": tok.to_dict(), "model": model.to_dict()},
            "breakdown": stats.overhead_breakdown(client_mean, ensemble, [tok, model]),
            # Estimated: the workload's rows, in order, batched as Triton batched them on average.
            "padding_waste": stats.padding_waste(w.tokens, model.avg_batch or 1.0, self.floor.runner),
        }

    def measure_baselines(self) -> None:
        folder = self.o.source_model or self.manifest.options.model
        if not folder or not Path(folder).is_dir():
            raise TritonizeError(
                f"the baselines need the model folder the repository was generated from ({folder!r} not found)",
                hint="pass --source-model FOLDER, or --baselines floor",
            )
        for key, (label, batch) in baselines.BASELINES.items():
            if key not in self.o.baselines:
                continue
            self.say(f"Starting the baseline: {label}")
            log = Path(self.o.output) / ".run" / f"baseline-{key}.log"
            with baselines.BaselineProcess(str(folder), batch, log) as url:
                for wname, w in self.workloads.items():
                    for c in self.o.concurrency:
                        before: dict = {}
                        result = load.measure(
                            lambda: load.BaselineHttp(url, self.o.timeout_s),
                            w.texts,
                            c,
                            self.o.bound(c),
                            lambda: before.update(baselines.counters(url)),
                        )
                        work = baselines.counters_delta(before, baselines.counters(url))
                        self._record(key, label, wname, result, {"server": work, "padding_waste": {"waste": work["padding_waste"]}})

    def measure_floor(self) -> dict:
        result = {}
        for wname, w in self.workloads.items():
            fixed = wname != "mixed"
            result[wname] = floor.measure(self.floor, w.texts, self.o.requests, self.o.duration_s if not self.o.requests else None,
                                          fixed, batch1=self.batch1.get(wname))
            f = result[wname]
            self.say(
                f"  {'floor':<24} {wname:<5} batch-1 p50 {f['batch1_latency_ms']['p50']:.1f} ms, best batch"
                f" {f['arrival']['rps']:.1f} req/s (sorted {f['sorted']['rps']:.1f})"
            )
        return result

    # -- the whole run -------------------------------------------------------
    def run(self) -> dict:
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.say(f"[bold]Triton[/] ({', '.join(self.o.protocols)})")
        self.measure_triton()
        if any(b in baselines.BASELINES for b in self.o.baselines):
            self.measure_baselines()
        floor_results = {}
        if "floor" in self.o.baselines:
            self.say("[bold]In-process floor[/] (same tokenizer and ONNX graph, no server)")
            floor_results = self.measure_floor()
        document = {
            "meta": self.meta(started),
            "workloads": {n: w.summary() for n, w in self.workloads.items()},
            "runs": self.runs,
            "floor": floor_results,
        }
        document["targets"] = evaluate(document)
        return document

    def meta(self, started: str) -> dict:
        o = self.o
        return {
            "model": self.name,
            "repository": str(Path(o.repository).resolve()),
            "source_model": o.source_model or self.manifest.options.model,
            "config": {f.name: getattr(self.manifest.options, f.name) for f in dataclasses.fields(Overrides)},
            "started": started,
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "bound": {"requests": o.requests} if o.requests else {"duration_s": o.duration_s},
            "concurrency": o.concurrency,
            "protocols": o.protocols,
            "baselines": o.baselines,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "note": SHARED_CPU_NOTE,
        }
