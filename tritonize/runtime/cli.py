"""`tritonize deploy {local,docker} {up,down,status,logs,switch,canary,shadow}`.

`up`, `down`, `status` and `logs` serve or report every model. `switch` moves one model, without refusing a
request, to the version its repository now names (versions.py). `canary` and `shadow` (`start`, the default,
then `promote`, `rollback` or `status`) serve `--version N` beside the served one, which gets a share of the
model's API requests (`--weight`) or a mirror of them (`--share`) until promoted or rolled back (candidate.py).

Each runtime's `cli` module (`local/cli.py`, `docker/cli.py`) exposes `add_arguments(parser)` for its own flags
and `from_args(options, args) -> Runtime`; this module holds what is common: flags (`--variant` among them),
dispatch and the printed summary.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..flags import options_from
from ..console import err, out
from ..errors import TritonizeError
from ..rollout_state import CANARY, SHADOW, Rollout
from ..spec import DEFAULT_VARIANT, VARIANT_CONFIGS
from .docker import cli as docker_cli
from .docker.cli import CONTAINER_VARIANT
from .local import cli as local_cli
from .base import Endpoints, Runtime, ServerOptions, sample_api_curl, sample_curl, served_manifests
from . import candidate
from .monitoring import sample_query

RUNTIMES = {
    "local": (local_cli, "the tritonserver binary from the nvidia-pytriton wheel (no Docker)"),
    "docker": (docker_cli, "NVIDIA's Triton container, through the docker SDK"),
}
ACTIONS = ("up", "down", "status", "logs", "switch", CANARY, SHADOW)
ROLLOUT_STEPS = ("start", "promote", "rollback", "status")  # what `canary` and `shadow` do (start by default)


def register(sub: argparse._SubParsersAction) -> None:
    deploy = sub.add_parser("deploy", help="serve a repository: local binary or container")
    runtimes = deploy.add_subparsers(dest="runtime", metavar="RUNTIME", required=True)
    for name, (module, help_text) in RUNTIMES.items():
        p = runtimes.add_parser(name, help=help_text)
        p.add_argument("action", choices=ACTIONS)
        p.add_argument("step", nargs="?", choices=ROLLOUT_STEPS, default="start",
                       help="`canary` and `shadow`: start (the default), promote, rollback or status")
        add_common_arguments(p)
        module.add_arguments(p)
        p.set_defaults(func=run, runtime=name)


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    d = ServerOptions()
    p.add_argument("--repository", "-r", type=Path, default=d.repository, help="model repository (default: %(default)s)")
    p.add_argument("--host", default=d.host, help="address to bind and to reach (default: %(default)s, loopback); "
                   "Triton's own HTTP port stays on loopback whatever it says: the API serves its routes")
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
    configs = p.add_mutually_exclusive_group()
    configs.add_argument(
        "--variant", choices=tuple(VARIANT_CONFIGS), default=None,
        help="`up`: production serves each step's config.pbtxt as NVIDIA's container does (the model step on "
             "Triton's native onnxruntime backend; locally `make backend` builds it); fused serves "
             "configs/fused.pbtxt, the tokenizer and the graph in one Python step (default: "
             f"{DEFAULT_VARIANT} locally, {CONTAINER_VARIANT} in the container)")
    configs.add_argument("--config-name", default=None, metavar="NAME",
                         help="deprecated spelling of --variant: serve each model's configs/NAME.pbtxt")
    p.add_argument("--model", default=None,
                   help="`switch`, `canary`, `shadow`: the model whose new version to serve, where the repository "
                        "holds several")
    p.add_argument("--version", type=int, default=None,
                   help="`canary`, `shadow`: the new version (written by `generate --version N`) served beside the "
                        "served one")
    p.add_argument("--weight", type=float, default=10.0,
                   help="`canary`: the percent of the model's API requests answered by the new version "
                        "(default: %(default)s)")
    p.add_argument("--share", type=float, default=20.0,
                   help="`shadow`: the percent of the model's API requests mirrored to the new version "
                        "(default: %(default)s)")
    p.add_argument("--tail", type=int, default=200, help="lines shown by `logs`")


def options_from_args(args: argparse.Namespace) -> ServerOptions:
    return options_from(ServerOptions, args, renamed={"timeout_s": "timeout"})


def make_runtime(args: argparse.Namespace) -> Runtime:
    module, _ = RUNTIMES[args.runtime]
    if getattr(args, "config_name", None) is not None:
        err.print("[yellow]--config-name is deprecated: use --variant production|fused[/]")
    return module.from_args(options_from_args(args), args)


def run(args: argparse.Namespace) -> int:
    if args.model and args.action not in ("switch", CANARY, SHADOW):
        raise TritonizeError(f"--model goes with `switch`, `canary` and `shadow` (`{args.action}` serves or reports "
                             "every model)")
    runtime = make_runtime(args)
    if args.action in (CANARY, SHADOW):
        return run_rollout(runtime, args)
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


def run_rollout(runtime: Runtime, args: argparse.Namespace) -> int:
    """`canary` and `shadow`: start, promote, roll back or report a model's rollout."""
    if args.step == "status":
        print_rollout(candidate.current(args.repository, args.model))
        return 0
    server = runtime.controlled()
    if args.step == "start":
        if args.version is None:
            raise TritonizeError(f"`{args.action}` needs --version N, the version to serve beside the served one")
        percent = args.weight if args.action == CANARY else args.share
        print_rollout(candidate.start(server, args.model, args.action, args.version, percent))
    elif args.step == "promote":
        done = candidate.promote(server, args.model)
        out.print(f"[bold green]Serving version {done.version}[/] (was {', '.join(map(str, done.previous)) or '-'})")
    else:
        undone = candidate.rollback(server, args.model)
        out.print(f"[bold]Rolled back[/]: serving version {undone.main} of {undone.model} alone")
    return 0


def print_rollout(rollout: Rollout) -> None:
    seen = rollout.observed
    share = "routed" if rollout.kind == CANARY else "mirrored"
    out.print(f"{rollout.kind} of {rollout.model}: version {rollout.candidate} ({rollout.candidate_name}) beside "
              f"version {rollout.main}, {rollout.percent:g}% {share}; {rollout.state}"
              + (f" ({rollout.reason})" if rollout.reason else ""), markup=False, highlight=False, soft_wrap=True)
    ms = lambda s: "-" if s is None else f"{s * 1e3:.1f} ms"  # noqa: E731
    if rollout.kind == CANARY:
        out.print(f"  candidate: {seen.requests} requests, {seen.errors} failed, p99 {ms(seen.p99_s)} "
                  f"(version {rollout.main}: p99 {ms(seen.main_p99_s)})")
    else:
        agreement = "-" if seen.agreement is None else f"mean {seen.agreement:.6f}, least {seen.agreement_min:.6f}"
        gate = f", promote at least {rollout.gate:g}" if rollout.gate is not None else ""
        out.print(f"  agreement ({rollout.comparison}) over {seen.requests} texts: {agreement}{gate}; "
                  f"{seen.errors} mirrored requests failed")


def print_summary(endpoints: Endpoints, repository: Path, runtime: Runtime) -> None:
    manifests = served_manifests(repository)
    out.print(f"[bold green]Triton is ready[/]  ({type(runtime).__name__})")
    status = runtime.status()
    api_url = status.api.split(": ", 1)[0] if status.api else None
    out.print(f"  HTTP     {endpoints.http}  (Triton's own: loopback only" + (f"; its routes for clients: {api_url}/v2)"
                                                                              if api_url else ")"))
    out.print(f"  gRPC     {endpoints.grpc}")
    out.print(f"  metrics  {endpoints.metrics}")
    if status.prometheus:
        out.print(f"  Prometheus {status.prometheus}")
    if api_url:
        out.print(f"  API      {api_url}  (Triton's /v2 routes, OpenAI /v1/embeddings, Cohere /v1/rerank, TEI routes; "
                  f"docs at {api_url}/docs)")
    for m in status.models:
        out.print(f"  model    {m.name} [{m.state}]")
    out.print("Try it:")
    for manifest in manifests or [None]:
        out.print("  " + sample_curl(endpoints, manifest, api_url), markup=False, highlight=False, soft_wrap=True)
        if api_url and manifest and (api_curl := sample_api_curl(api_url, manifest)):
            out.print("  " + api_curl, markup=False, highlight=False, soft_wrap=True)
    if status.prometheus:
        out.print("Requests per second per model, through Prometheus:")
        out.print("  " + sample_query(status.prometheus), markup=False, highlight=False, soft_wrap=True)
