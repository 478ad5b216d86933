"""The model and the server a run measures (`measured_model`, `triton_endpoints`: a local server on free ports where
asked), and one measurement as the run's document holds it (`record`) and says it (`say_run`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from ..manifest import Manifest, choose, read_manifests
from ..repository import parse_config
from ..runtime.base import Endpoints, ServerOptions
from ..runtime.machine import free_ports
from ..spec import CONFIG_FILE, MODEL, PRODUCTION_VARIANT, repo_paths
from . import load
from .options import BenchOptions


def record(system: str, label: str, workload: str, result: load.LoadResult, extra: dict, texts: int = 1) -> dict:
    """One measurement as the run's document holds it."""
    return {"system": system, "label": label, "workload": workload, "texts_per_request": texts, **result.summary(),
            **extra}


def say_run(run: dict) -> str:
    """One measurement in a line, as it finishes."""
    lat, n = run["latency_ms"], run["texts_per_request"]
    shape = f"{run['workload']}{f' x{n}' if n > 1 else ''}"
    return (f"  {run['label']:<24} {shape:<9} c={run['concurrency']:<3} p50 {lat['p50']:7.1f} ms  p99 {lat['p99']:7.1f} ms"
            f"  {run['throughput_rps']:6.1f} req/s"
            + (f"  [red]errors {run['errors']}{refused_of(run)}[/]" if run["errors"] else ""))


def refused_of(run: dict) -> str:
    """How many of a run's errors were refusals (the server full), where any were."""
    return f" ({run['refused']} refused)" if run.get("refused") else ""


def measured_model(repository: Path, model: str = "") -> Manifest:
    """The repository's model that `model` names; a one-model repository's only model whatever `model` says,
    since a server may serve it under another name (its answers are then checked against this model's)."""
    manifests = read_manifests(repository)
    if model and len(manifests) == 1:
        return manifests[0]
    return choose(manifests, model or None, repository)


def native_model_threads(repository: Path, manifest: Manifest, variant: str) -> int:
    """The model step's instances where the production variant runs it on the native onnxruntime backend, inside
    the server process (one onnxruntime thread each: the server's busiest threads, cpu.CpuMeter); 0 where it has a
    stub of its own (the fused step)."""
    if variant != PRODUCTION_VARIANT:
        return 0
    path = repo_paths(repository, manifest.name)[MODEL.key] / CONFIG_FILE
    config = parse_config(path.read_text(), str(path))
    return sum(g.count for g in config.instance_group) if config.platform == "onnxruntime_onnx" else 0


@contextlib.contextmanager
def triton_endpoints(options: BenchOptions) -> Iterator[tuple[str, str, str, int | None]]:
    """(http_url, grpc_url, metrics_url, server PID or None) of the server to measure; starts a local one on free
    ports if asked."""
    if not options.start_local:
        yield options.http_url, options.grpc_url, options.metrics_url, None
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
    runtime = LocalRuntime(server, quiet=options.quiet, variant=options.variant)
    with runtime as endpoints:
        endpoints: Endpoints
        yield endpoints.http, endpoints.grpc, endpoints.metrics, runtime.server_pid
