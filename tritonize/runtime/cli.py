"""`tritonize deploy {local,docker} {up,down,status,logs}`.

Each runtime module (`local`, `docker`) exposes `add_arguments(parser)` for its
own flags and `from_args(options, args) -> Runtime`; this module holds what is
common: flags, dispatch and the printed summary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..console import out
from ..errors import TritonizeError
from . import docker, local
from .base import Endpoints, Runtime, ServerOptions, sample_api_curl, sample_curl, served_manifests
from .monitoring import sample_query

RUNTIMES = {
    "local": (local, "the tritonserver binary from the nvidia-pytriton wheel (no Docker)"),
    "docker": (docker, "NVIDIA's Triton container, through the docker SDK"),
}
ACTIONS = ("up", "down", "status", "logs", "switch")


def register(sub: argparse._SubParsersAction) -> None:
    deploy = sub.add_parser("deploy", help="serve a repository: local binary or container")
    runtimes = deploy.add_subparsers(dest="runtime", metavar="RUNTIME", required=True)
    for name, (module, help_text) in RUNTIMES.items():
        p = runtimes.add_parser(name, help=help_text)
        p.add_argument("action", choices=ACTIONS)
        add_common_arguments(p)
        module.add_arguments(p)
        p.set_defaults(func=run, runtime=name)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    d = ServerOptions()
    p.add_argument("--repository", "-r", type=Path, default=d.repository, help="model repository (default: %(default)s)")
    p.add_argument("--host", default=d.host, help="address to bind and to reach (default: %(default)s, loopback)")
    p.add_argument("--http-port", type=int, default=d.http_port)
    p.add_argument("--grpc-port", type=int, default=d.grpc_port)
    p.add_argument("--metrics-port", type=int, default=d.metrics_port)
    p.add_argument("--run-dir", type=Path, default=d.run_dir, help="PID and log files (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=d.timeout_s, help="seconds to wait for readiness")
    p.add_argument(
        "--model-control",
        choices=("none", "explicit"),
        default=d.model_control,
        help="'explicit' turns on the load/unload API, behind the instance's admin key (off by default); locally, "
        "the supervisor then reloads a step whose stub died instead of restarting the server",
    )
    p.add_argument("--log-verbose", type=int, default=d.log_verbose)
    p.add_argument("--model", default=None,
                   help="`switch`: the model whose new version to serve, where the repository holds several")
    p.add_argument("--tail", type=int, default=200, help="lines shown by `logs`")


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        repository=args.repository,
        host=args.host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        run_dir=args.run_dir,
        timeout_s=args.timeout,
        model_control=args.model_control,
        log_verbose=args.log_verbose,
    )


def make_runtime(args: argparse.Namespace) -> Runtime:
    module, _ = RUNTIMES[args.runtime]
    return module.from_args(options_from_args(args), args)


def run(args: argparse.Namespace) -> int:
    if args.model and args.action != "switch":
        raise TritonizeError(f"--model goes with `switch` (`{args.action}` serves or reports every model)")
    runtime = make_runtime(args)
    if args.action == "up":
        endpoints = runtime.up()
        print_summary(endpoints, args.repository, runtime)
    elif args.action == "down":
        runtime.down()  # each runtime says what it stopped
    elif args.action == "status":
        status = runtime.status()
        out.print(f"running: {status.running}   ready: {status.ready}" + (f"   {status.detail}" if status.detail else ""))
        if status.health:
            out.print(f"health: {status.health}")
        if status.restarts is not None:
            out.print(f"supervised: {status.restarts} restart(s), {status.reloads or 0} step reload(s) so far")
        if status.monitoring:
            out.print(f"monitoring: {status.monitoring}", markup=False, highlight=False, soft_wrap=True)
        if status.api:
            out.print(f"api: {status.api}", markup=False, highlight=False, soft_wrap=True)
        for m in status.models:
            out.print(f"  {m.name:<32} v{m.version or '-':<4} {m.state}" + (f"  ({m.reason})" if m.reason else ""))
        return 0 if status.ready else 1
    elif args.action == "switch":
        done = runtime.switch(args.model)
        if done.changed:
            out.print(f"[bold green]Serving version {done.version}[/] (was {', '.join(map(str, done.previous)) or '-'}): "
                      f"loaded in {done.load_s:.1f}s, old version retired in {done.retire_s:.1f}s")
        else:
            out.print(f"already serving version {done.version} only")
    elif args.action == "logs":
        out.print(runtime.logs(args.tail), end="", markup=False, highlight=False, soft_wrap=True)
    return 0


def print_summary(endpoints: Endpoints, repository: Path, runtime: Runtime) -> None:
    manifests = served_manifests(repository)
    out.print(f"[bold green]Triton is ready[/]  ({type(runtime).__name__})")
    out.print(f"  HTTP     {endpoints.http}")
    out.print(f"  gRPC     {endpoints.grpc}")
    out.print(f"  metrics  {endpoints.metrics}")
    status = runtime.status()
    if status.prometheus:
        out.print(f"  Prometheus {status.prometheus}")
    api_url = status.api.split(": ", 1)[0] if status.api else None
    if api_url:
        out.print(f"  API      {api_url}  (OpenAI /v1/embeddings, Cohere /v1/rerank, TEI routes; docs at {api_url}/docs)")
    for m in status.models:
        out.print(f"  model    {m.name} [{m.state}]")
    out.print("Try it:")
    for manifest in manifests or [None]:
        out.print("  " + sample_curl(endpoints, manifest), markup=False, highlight=False, soft_wrap=True)
        if api_url and manifest and (api_curl := sample_api_curl(api_url, manifest)):
            out.print("  " + api_curl, markup=False, highlight=False, soft_wrap=True)
    if status.prometheus:
        out.print("Requests per second per model, through Prometheus:")
        out.print("  " + sample_query(status.prometheus), markup=False, highlight=False, soft_wrap=True)
