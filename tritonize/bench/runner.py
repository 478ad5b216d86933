"""One benchmark run: Triton (gRPC, HTTP), the peers (the servers compared against) and the floor, same model,
same texts.

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
from pathlib import Path

from .. import tasks
from ..console import err
from ..errors import TritonizeError
from ..manifest import Manifest, read_manifests
from ..spec import ENSEMBLE, MODEL, repo_paths, step_names
from ..spec.options import Overrides
from . import check, corpus, cpu, floor, infinity, load, peers, server_counters
from .measured import measured_model, native_model_threads, record, say_run, triton_endpoints
from .options import (
    API_PROTOCOLS,
    API_SYSTEM,
    FLOOR,
    FRONT,
    SHARED_CPU_NOTE,
    TRITON_LABELS,
    TRITON_SYSTEM,
    BenchOptions,
)
from .report import client_inclusive_floor, compared_system, label_of, split_system
from .targets import SCALING, evaluate


def is_triton(system: str) -> bool:
    """Triton's own checks, for the repository measured and for every compared one."""
    return split_system(system)[0] == TRITON_SYSTEM


def compare_tag(main: Manifest, other: Manifest, folder: Path, taken: set[str]) -> str:
    """How a compared repository is named in the run: its precision where that differs from the measured
    repository's, else its folder's name."""
    tag = other.options.precision if other.options.precision != main.options.precision else folder.resolve().name
    return tag if tag not in taken else f"{tag}-{len(taken) + 1}"


def step_models(repository: Path, name: str) -> dict[str, str]:
    """The Triton models a request passes through, by role: the ensemble first, then each step present."""
    paths = repo_paths(repository, name)
    return {role: path.name for role, path in paths.items() if role in step_names(name) and path.is_dir()}


def ensemble_roles(steps: dict, task) -> list[str]:
    """The steps the ensemble calls itself: a step that calls the model step (orchestrates) already times it."""
    return [role for role in steps if role != ENSEMBLE and not (task.pipeline.orchestrates and role == MODEL.key)]


class Bench:
    """Runs the systems in turn and collects one JSON-able document."""

    def __init__(self, options: BenchOptions):
        self.o = options
        repo = Path(options.repository)
        manifest = measured_model(repo, options.model)
        self.name = options.model or manifest.name
        self.manifest = manifest
        self.task = tasks.of(manifest.model.head)
        self.inputs = tuple(t.name for t in self.task.contract.text_inputs)
        self.floor = floor.Floor(repo, name=manifest.name)
        self.workloads = corpus.workloads_for(
            self.floor.chain, self.task, options.workloads, options.corpus_file, options.short_tokens, options.long_tokens
        )
        # What the peers and the floor's throughput measure: texts (they read no images).
        self.text_workloads = {k: w for k, w in self.workloads.items() if not w.images}
        self.steps = step_models(repo, manifest.name)
        self.steps[ENSEMBLE] = self.name
        self.runs: list[dict] = []
        self.checks: dict[str, dict] = {}  # per system and workload: its answers against the floor's
        self.skipped: dict[str, str] = {}  # per peer asked for but not measured: why, in one line
        self.infinity: dict = {}  # the Infinity install measured, and each engine's warnings
        self._expected: dict[str, list[dict]] = {}
        # The floor's batch-1 latencies, taken right around Triton's concurrency-1 run of each workload.
        self.batch1: dict[str, list[float]] = {}
        self.compared_meta: dict[str, dict] = {}  # per compared repository's tag: its folder, name and precision
        self.api_url = ""  # the API's /v1, while one is measured

    def say(self, message: str) -> None:
        if not self.o.quiet:
            err.print(message)

    # -- systems -----------------------------------------------------------
    def _record(self, system: str, label: str, workload: str, result: load.LoadResult, extra: dict,
                texts: int = 1) -> dict:
        run = record(system, label, workload, result, extra, texts)
        self.runs.append(run)
        self.say(say_run(run))
        return run

    def api_measured(self) -> bool:
        """Whether `--protocols api` can measure this model: its load goes through /v1/embeddings."""
        return self.task.contract.bench_as_embeddings

    def native_model_threads(self) -> int:
        """The model's threads inside a local server (measured.native_model_threads); 0 for a stand-in."""
        if not self.o.start_local or self.o.stand_in:
            # A stand-in's threads are not the server's busiest (gRPC's are): its share is Triton's execution time.
            return 0
        return native_model_threads(self.o.repository, self.manifest, self.o.variant)

    def measure_triton(self) -> None:
        with triton_endpoints(self.o) as (http_url, grpc_url, metrics_url, server_pid):
            self.check_triton(grpc_url)
            meter = cpu.CpuMeter(server_pid, model_threads=self.native_model_threads()) if server_pid else None
            try:
                server_counters.fetch(http_url)
                snaps: server_counters.Snapshots | None = server_counters.Snapshots(http_url, list(self.steps.values()))
            except OSError:
                self.say(f"[yellow]no statistics at {http_url}: per-step figures are left out[/]")
                snaps = None
            try:
                server_counters.served_counters(metrics_url)
                served: server_counters.ServedCounters | None = server_counters.ServedCounters(metrics_url,
                                                                                    list(self.steps.values()))
            except (OSError, ValueError):
                self.say(f"[yellow]no metrics at {metrics_url}: the served steps' counters are left out[/]")
                served = None
            for protocol in self.o.protocols:
                with contextlib.ExitStack() as stack:
                    make = self.sender(protocol, http_url, grpc_url, stack, meter)
                    self.measure_protocol(protocol, make, snaps, meter, served)
                    self.after_protocol(protocol, meter)

    def after_protocol(self, protocol: str, meter: cpu.CpuMeter | None) -> None:
        """What a kind of run measures besides, while the protocol's server is still up (bench/stand_in.py)."""

    def sender(self, protocol: str, http_url: str, grpc_url: str, stack: contextlib.ExitStack,
               meter: cpu.CpuMeter | None = None):
        """What makes the sender of `protocol` for requests of n rows, each request's inputs made by `request`
        (load.Request); for the API, its process is started here, checked first, and its CPU measured with the
        server's."""
        if protocol == "grpc":
            return lambda n, request: load.TritonGrpc(grpc_url, self.name, request, self.o.timeout_s, n)
        if protocol == "http":
            return lambda n, request: load.TritonHttp(http_url, self.name, request, self.o.timeout_s, n)
        from ..api.child import ApiProcess
        from ..runtime.machine import free_ports
        from .infinity import ask

        (port,) = free_ports(1)
        work = Path(self.o.output) / ".run"
        work.mkdir(parents=True, exist_ok=True)
        api = ApiProcess(self.o.repository, grpc_url, http_url, port=port, log_file=work / "api.log",
                         extra=API_PROTOCOLS.get(protocol, ()))
        root = stack.enter_context(api)
        if meter and api.proc:
            meter.watch(cpu.API, api.proc.pid)  # it leads its own process group
            stack.callback(meter.unwatch, cpu.API)
        if protocol == FRONT:  # Triton's own HTTP requests, to the API's /v2 routes
            self._check_front(root)
            return lambda n, request: load.TritonHttp(root, self.name, request, self.o.timeout_s, n)
        url = root + "/v1"
        system = API_SYSTEM if protocol == "api" else f"triton-{protocol}"
        self._check(system, TRITON_LABELS[protocol], lambda row: ask(url, self.name, row, self.o.timeout_s), check.ATOL)
        self.api_url = url  # where after_protocol finds it
        return lambda n, request: load.OpenAIEmbeddings(url, self.name, self.o.timeout_s, n)

    def _check_front(self, root: str) -> None:
        """The front's answers over Triton's HTTP protocol against the floor's, as Triton's own are checked."""
        from ..client import TextClient

        with TextClient(root.split("//", 1)[1], self.name, protocol="http", timeout_s=self.o.timeout_s) as client:
            for wname, w in self.workloads.items():
                request = corpus.request_of(self.task.contract, w)
                self._check(f"triton-{FRONT}", TRITON_LABELS[FRONT],
                            lambda row: check.one_row(client.infer(request([row]))), check.ATOL, {wname: w})

    def measure_protocol(self, protocol: str, make, snaps, meter, served) -> None:
        label = TRITON_LABELS[protocol]
        for wname, w in self.workloads.items():
            request = corpus.request_of(self.task.contract, w)
            for n in self.o.texts_per_request:
                requests = load.requests_of(w.rows, n)
                for c in self.o.concurrency:
                    pair = (c == 1 and n == 1 and protocol == self.o.protocols[0] and FLOOR in self.o.peers
                            and wname in self.text_workloads)
                    if pair:
                        self._floor_batch1(wname, w)
                    starts = [f for f in (snaps.start if snaps else None, meter.start if meter else None,
                                          served.start if served else None) if f]
                    result = load.measure(lambda: make(n, request), requests, c, self.o.bound(c), lambda: [f() for f in starts])
                    # The CPU first, as the load stops: reading the counters below costs the server some.
                    used = meter.finish(result.completed, result.client_cpu_s, result.wall_s) if meter else None
                    if pair:
                        self._floor_batch1(wname, w)
                    counted = served.finish() if served else None
                    graph_batch = (counted or {}).get(server_counters.GRAPH_BATCH)
                    extra = self._triton_extra(snaps, result, w, graph_batch) if snaps else {}
                    if used:
                        extra["cpu"] = used
                    if counted is not None:
                        extra["served"] = counted
                    self._record(f"triton-{protocol}", label, wname, result, extra, n)

    def _floor_answers(self, wname: str) -> list[dict]:
        """The floor's answers to a workload's first rows: computed once, compared with every system (the task's
        answer; the served token counts are Triton's alone, checked by its own tests)."""
        if wname not in self._expected:
            w = self.workloads[wname]
            rows = w.rows[: check.ROWS]
            answers = [(self.floor.chain.images(list(row)) if w.images else self.floor.one(row)).outputs for row in rows]
            self._expected[wname] = [check.one_row({n: a[n] for n in self.task.contract.output_names}) for a in answers]
        return self._expected[wname]

    def _check(self, system: str, label: str, ask, atol: float | None = None,
               workloads: dict[str, corpus.Workload] | None = None) -> None:
        """The first rows of each workload (of `workloads`, where given), answered by `ask(row)` and by the floor,
        compared: numbers within `atol`, or (atol None) the embedding by cosine."""
        for wname, w in (self.workloads if workloads is None else workloads).items():
            rows = w.rows[: check.ROWS]
            got = []
            for row in rows:
                try:
                    got.append(ask(row))
                except Exception as exc:  # noqa: BLE001 - a failed answer is a disagreement, recorded
                    got.append({"error": f"{type(exc).__name__}: {exc}"[:200]})
            expected = self._floor_answers(wname)
            result = (check.compare(expected, got, atol) if atol is not None
                      else check.compare_cosine(expected, got, infinity.ANSWER))
            self.checks.setdefault(system, {})[wname] = result.to_dict()
            mark = "[green]agree[/]" if result.passed else f"[red]disagree: {result.first_mismatch}[/]"
            self.say(f"  answers, {wname}: {label} and the floor {mark} on {result.agree}/{result.rows} rows "
                     f"({check.describe(result.to_dict())})")

    def check_triton(self, grpc_url: str) -> None:
        """Triton must answer as the floor does: the same steps, the same graph."""
        from ..client import TextClient

        with TextClient(grpc_url, self.name, timeout_s=self.o.timeout_s) as client:
            for wname, w in self.workloads.items():
                request = corpus.request_of(self.task.contract, w)
                self._check(TRITON_SYSTEM, "Triton", lambda row: check.one_row(client.infer(request([row]))),
                            check.ATOL, {wname: w})

    def _floor_batch1(self, wname: str, w: corpus.Workload) -> None:
        """Half the floor's batch-1 measurement: one half just before Triton's concurrency-1 run, one just after.

        Latency differences of a millisecond are the targets here, and a shared
        machine drifts by that much within minutes: measured side by side, both
        systems see the same machine.
        """
        requests = self.o.requests // 2 if self.o.requests else None
        duration = self.o.duration_s / 2 if not self.o.requests and self.o.duration_s else None
        lat = self.floor.batch1_latency(w.rows, max(1, requests) if requests is not None else None, duration)
        self.batch1.setdefault(wname, []).extend(lat)

    def _triton_extra(self, snaps: server_counters.Snapshots, result: load.LoadResult, w: corpus.Workload,
                      graph_batch: float | None = None) -> dict:
        deltas = snaps.finish(expected=result.completed)
        by_role = {role: deltas[model] for role, model in self.steps.items()}
        client_mean = result.summary()["latency_ms"]["mean"]
        called = [by_role[r] for r in ensemble_roles(by_role, self.task)]
        extra = {
            "steps": {role: d.to_dict() for role, d in by_role.items()},
            "breakdown": server_counters.overhead_breakdown(client_mean, by_role[ENSEMBLE], called),
        }
        if w.model_rows:  # images: no tokens, no padding
            # Estimated: the workload's rows, in order, batched as the graph ran them on average.
            extra["padding_waste"] = server_counters.padding_waste(
                w.model_rows, graph_batch or by_role[MODEL.key].avg_batch or 1.0, self.floor.runner)
        return extra

    def measure_peers(self) -> None:
        folder = self.source_folder()
        for key, (label, batch) in peers.PEERS.items():
            if key not in self.o.peers:
                continue
            self.say(f"Starting the peer: {label}")
            log = Path(self.o.output) / ".run" / f"peer-{key}.log"
            with peers.PeerProcess(str(folder), batch, log) as url:
                self._check(key, label, lambda row: peers.ask(url, row), check.TORCH_ATOL, self.text_workloads)
                for wname, w in self.text_workloads.items():
                    for c in self.o.concurrency:
                        before: dict = {}
                        result = load.measure(
                            lambda: load.PeerHttp(url, self.o.timeout_s),
                            w.rows,
                            c,
                            self.o.bound(c),
                            lambda: before.update(peers.counters(url)),
                        )
                        work = peers.counters_delta(before, peers.counters(url))
                        self._record(key, label, wname, result, {"server": work, "padding_waste": {"waste": work["padding_waste"]}})

    def measure_floor(self) -> dict:
        result, more = {}, SCALING[0]
        for wname, w in self.text_workloads.items():
            fixed = wname != "mixed"
            result[wname] = floor.measure(self.floor, w.rows, self.o.requests, self.o.duration_s if not self.o.requests else None,
                                          fixed, batch1=self.batch1.get(wname), ceilings=(more,))
            f = result[wname]
            orders = ", ".join(f"{o} {f[o]['rps']:.1f}" for o in ("sorted", "regrouped") if o in f)
            ceiling = f["scaling_ceiling"].get(str(more))
            self.say(
                f"  {'floor':<24} {wname:<5} batch-1 p50 {f['batch1_latency_ms']['p50']:.1f} ms, best batch"
                f" {f['arrival']['rps']:.1f} req/s ({orders})"
                + (f"; concurrency {more} over 1 at most {ceiling:.2f}x" if ceiling else "")
            )
        return result

    def measure_image_split(self) -> dict:
        """The images workload's in-process split: the first step's work per image against the graph's, one
        thread each, image after image."""
        w = self.workloads[corpus.IMAGES]
        split = self.floor.image_split(w.rows, self.o.requests, self.o.duration_s if not self.o.requests else None)
        self.say(f"  {'in process, one thread':<24} {corpus.IMAGES:<5} first step p50 {split['first_ms']['p50']:.1f} ms"
                 f" (decode, preprocess), model step p50 {split['model_ms']['p50']:.1f} ms (the graph) per image")
        return split

    def skip(self, system: str, reason: str) -> None:
        self.skipped[system] = reason
        self.say(f"[yellow]{label_of(system)}: skipped: {reason}[/]")

    def find_infinity(self) -> infinity.Install | None:
        """The Infinity to measure, before anything is timed: a missing one asked for by name fails the run at
        once; one only implied by the default peers is skipped, in one line."""
        wanted = [k for k in infinity.ENGINES if k in self.o.peers]
        if not wanted:
            return None
        if not self.task.contract.bench_as_embeddings:
            for key in wanted:
                self.skip(key, f"Infinity serves embeddings here; this repository's task is {self.task.name}")
            return None
        try:
            return infinity.locate(self.o.infinity_python)
        except infinity.Unavailable as exc:
            if self.o.peers_asked or self.o.infinity_python:
                raise TritonizeError(str(exc), hint=f"install it: {infinity.INSTALL_HINT}") from None
            for key in wanted:
                self.skip(key, f"{exc}: {infinity.INSTALL_HINT}")
            return None

    def measure_infinity(self, install: infinity.Install) -> None:
        """Each Infinity engine asked for, started on the source folder with Infinity's defaults; checked, then
        measured as the doc server is. An engine that does not start is skipped with its reason."""
        folder = self.source_folder()
        head = self.manifest.model.head  # an embedding head: find_infinity skipped every other task
        self.infinity = {**install.to_dict(), "engines": {}}
        for key, engine in infinity.ENGINES.items():
            if key not in self.o.peers:
                continue
            self.say(f"Starting the peer: {engine.label} (Infinity {install.version})")
            work = Path(self.o.output) / ".run" / f"peer-{key}"
            server = infinity.InfinityServer(install, engine, str(folder), self.name, head.pooling, work)
            with contextlib.ExitStack() as stack:
                try:
                    url = stack.enter_context(server)
                except infinity.Unavailable as exc:
                    self.skip(key, f"its {engine.engine} engine did not start: {exc}")
                    continue
                self._check(key, engine.label, lambda row: infinity.ask(url, self.name, row),
                            workloads=self.text_workloads)
                for wname, w in self.text_workloads.items():
                    for c in self.o.concurrency:
                        result = load.measure(lambda: load.OpenAIEmbeddings(url, self.name, self.o.timeout_s),
                                              w.rows, c, self.o.bound(c))
                        self._record(key, engine.label, wname, result, {})
                self.infinity["engines"][key] = {"engine": engine.engine, "warnings": server.warnings()}

    def compared(self, folder: Path) -> tuple[str, Bench]:
        """A repository to measure beside this one: same task and inputs, or refused in one line. Where it holds
        several models, the one named as the measured one is compared."""
        model = self.name if self.name in {m.name for m in read_manifests(folder)} else ""
        sub = Bench(dataclasses.replace(self.o, repository=folder, model=model, start_local=True, peers=[], compare=[],
                                        output=Path(self.o.output) / f"compare-{len(self.compared_meta) + 1}"))
        if sub.task.name != self.task.name or sub.inputs != self.inputs:
            raise TritonizeError(f"--compare {folder}: its task is {sub.task.name} with inputs {', '.join(sub.inputs)}; "
                                 f"the repository measured is {self.task.name} with {', '.join(self.inputs)}",
                                 hint="compare repositories of the same task, e.g. int8 beside fp32")
        tag = compare_tag(self.manifest, sub.manifest, folder, set(self.compared_meta))
        self.compared_meta[tag] = {"repository": str(folder.resolve()), "model": sub.name,
                                   "precision": sub.manifest.options.precision}
        return tag, sub

    def compared_variant(self, variant: str) -> tuple[str, Bench]:
        """This repository on its own local server, serving another variant; tagged with the variant's name."""
        if variant == self.o.variant or variant in self.compared_meta:
            raise TritonizeError(f"--compare-variant {variant}: that variant is measured already",
                                 hint=f"the run measures --variant {self.o.variant}; compare another one")
        sub = Bench(dataclasses.replace(self.o, start_local=True, peers=[], compare=[], compare_variants=[],
                                        variant=variant,
                                        output=Path(self.o.output) / f"compare-{len(self.compared_meta) + 1}"))
        self.compared_meta[variant] = {"repository": str(Path(self.o.repository).resolve()), "model": sub.name,
                                       "precision": sub.manifest.options.precision, "variant": variant}
        return variant, sub

    def measure_compared(self, tag: str, sub: Bench) -> None:
        """Triton on the compared repository, its answers checked against its own graph in-process; its runs
        and checks join this run's under systems named with the tag."""
        self.say(f"[bold]Triton, {tag}[/] ({self.compared_meta[tag]['repository']}, a local server)")
        sub.measure_triton()
        for run in sub.runs:
            run.update(system=compared_system(run["system"], tag), label=f"{run['label']} {tag}")
            self.runs.append(run)
        for system, by_workload in sub.checks.items():
            self.checks[compared_system(system, tag)] = by_workload

    def source_folder(self) -> Path:
        folder = self.o.source_model or self.manifest.options.model
        if not folder or not Path(folder).is_dir():
            raise TritonizeError(
                f"the peers need the model folder the repository was generated from ({folder!r} not found)",
                hint="pass --source-model FOLDER, or --peers floor",
            )
        return Path(folder)

    # -- the whole run -------------------------------------------------------
    def run(self) -> dict:
        started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        if any(b != FLOOR for b in self.o.peers):
            self.source_folder()  # before anything is timed
        if set(API_PROTOCOLS) & set(self.o.protocols) and not self.api_measured():
            raise TritonizeError(f"--protocols api measures /v1/embeddings; this repository's task is {self.task.name}",
                                 hint="use --protocols grpc,http")
        if corpus.IMAGES in self.workloads and self.o.protocols != ["grpc"]:
            raise TritonizeError(f"the {corpus.IMAGES} workload is sent over gRPC alone (Triton's HTTP/JSON carries "
                                 "texts, not files)", hint="add --protocols grpc")
        install = self.find_infinity()
        compared = [self.compared(Path(folder)) for folder in self.o.compare]  # refused before anything is timed
        compared += [self.compared_variant(variant) for variant in self.o.compare_variants]
        self.say(f"[bold]Triton[/] ({', '.join(self.o.protocols)})")
        self.measure_triton()
        for tag, other in compared:
            self.measure_compared(tag, other)
        if any(b in peers.PEERS for b in self.o.peers) and self.text_workloads:
            self.measure_peers()
        elif any(b in peers.PEERS for b in self.o.peers):
            for key in (k for k in peers.PEERS if k in self.o.peers):
                self.skip(key, f"it reads texts, and this run sends {corpus.IMAGES} alone")
        if install is not None:
            self.measure_infinity(install)
        floor_results, image_split = {}, {}
        if FLOOR in self.o.peers and self.text_workloads:
            self.say("[bold]In-process floor[/] (same tokenizer and ONNX graph, no server)")
            floor_results = self.measure_floor()
        if FLOOR in self.o.peers and corpus.IMAGES in self.workloads:
            self.say("[bold]In-process, images[/] (the first step's work and the graph, one image at a time, no server)")
            image_split = self.measure_image_split()
        document = {
            "meta": self.meta(started),
            "workloads": {n: w.summary() for n, w in self.workloads.items()},
            "runs": self.runs,
            "floor": floor_results,
            **({"image_split": image_split} if image_split else {}),
            "checks": self.checks,
            "skipped": self.skipped,
            "compared": self.compared_meta,
        }
        for run in document["runs"]:
            limit = client_inclusive_floor(document, run)
            if limit:
                run["client_inclusive_floor"] = limit
        document["targets"] = evaluate(document)
        return document

    def meta(self, started: str) -> dict:
        o = self.o
        return {
            "model": self.name,
            "task": self.task.name,
            "precision": self.manifest.options.precision,
            "variant": o.variant if o.start_local else "as served",
            "inputs": list(self.inputs),
            "repository": str(Path(o.repository).resolve()),
            "source_model": o.source_model or self.manifest.options.model,
            "config": {f.name: getattr(self.manifest.options, f.name) for f in dataclasses.fields(Overrides)},
            "started": started,
            "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "bound": {"requests": o.requests} if o.requests else {"duration_s": o.duration_s},
            "concurrency": o.concurrency,
            "protocols": o.protocols,
            "peers": o.peers,
            **({"infinity": self.infinity} if self.infinity else {}),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
            "note": SHARED_CPU_NOTE,
        }
