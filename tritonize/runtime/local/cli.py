"""`deploy.py local`'s own flags (`add_arguments`) and the `LocalRuntime` they describe (`from_args`); the flags
every runtime shares, `--variant` among them, are runtime/cli.py's."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...api.child import ApiOptions
from ...api.state import DEFAULT_PORT as DEFAULT_API_PORT
from ...errors import TritonizeError
from ...spec import DEFAULT_VARIANT, EARLIER_FUSED_CONFIG_NAME, FUSED_VARIANT, VARIANT_CONFIGS
from .. import native_backend
from ..base import Runtime, ServerOptions
from ..monitoring import DEFAULT_PORT as DEFAULT_PROMETHEUS_PORT
from ..monitoring import DEFAULT_SCRAPE_INTERVAL_S, INSTALL_HINT, MonitoringOptions
from .runtime import DEFAULT_STOP_TIMEOUT_S, LocalRuntime


def variant_from_args(args: argparse.Namespace) -> str:
    """`--variant`, or the variant whose configs the deprecated `--config-name` names (fused by either of its names);
    the local server serves the repository's two variants only."""
    variant = getattr(args, "variant", None)
    name = getattr(args, "config_name", None)
    if name is None:
        return variant or DEFAULT_VARIANT
    by_name = {config: v for v, config in VARIANT_CONFIGS.items() if config} | {EARLIER_FUSED_CONFIG_NAME: FUSED_VARIANT}
    if name not in by_name:
        raise TritonizeError(f"--config-name {name}: the local server serves the variants "
                             f"{', '.join(VARIANT_CONFIGS)} only", hint="use --variant")
    return by_name[name]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tritonserver",
        type=Path,
        default=None,
        help="tritonserver binary to run (default: the one in the nvidia-pytriton wheel)",
    )
    parser.add_argument(
        "--onnxruntime-backend",
        type=Path,
        default=None,
        help=f"`up --variant production`: a built backend folder (default: ${native_backend.ENV}, else the one "
             "`make backend` built)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=DEFAULT_STOP_TIMEOUT_S,
        help="`down`: seconds to let in-flight requests drain before SIGKILL (default: %(default)s)",
    )
    parser.add_argument(
        "--no-supervise",
        action="store_true",
        help="`up`: start no supervisor (by default one reloads a step whose stub died, or restarts the server)",
    )
    a = parser.add_argument_group("the HTTP API (OpenAI, Cohere/Jina and text-embeddings-inference routes)")
    a.add_argument("--no-api", action="store_true", help="`up`: start no API beside the server")
    a.add_argument("--api-port", type=int, default=DEFAULT_API_PORT, help="`up`: the API's port, on --host "
                   "(default: %(default)s)")
    a.add_argument("--api-key-file", type=Path, default=None,
                   help="`up`: require `Authorization: Bearer <key>` on every API route but /health (the file's key)")
    a.add_argument("--api-workers", type=int, default=None,
                   help="`up`: the API's processes on its port (`tritonize api --workers`; default: the API's: "
                        "what `tritonize tune --api-workers` wrote into the repository, else 1)")
    g = parser.add_argument_group("monitoring")
    g.add_argument(
        "--monitoring",
        action="store_true",
        help=f"`up`: also start a Prometheus that scrapes the metrics port (needs the binary: {INSTALL_HINT})",
    )
    g.add_argument("--prometheus-port", type=int, default=DEFAULT_PROMETHEUS_PORT,
                   help="`up --monitoring`: Prometheus's port, on --host (default: %(default)s)")
    g.add_argument("--scrape-interval", type=float, default=DEFAULT_SCRAPE_INTERVAL_S,
                   help="`up --monitoring`: seconds between scrapes (default: %(default)s)")


def api_workers(count: int | None) -> int | None:
    if count is not None and count < 1:
        raise TritonizeError("--api-workers must be positive")
    return count


def from_args(options: ServerOptions, args: argparse.Namespace) -> Runtime:
    return LocalRuntime(
        options,
        tritonserver=getattr(args, "tritonserver", None),
        variant=variant_from_args(args),
        onnxruntime_backend=getattr(args, "onnxruntime_backend", None),
        stop_timeout_s=getattr(args, "stop_timeout", DEFAULT_STOP_TIMEOUT_S),
        supervise=not getattr(args, "no_supervise", False),
        monitoring=MonitoringOptions(
            port=getattr(args, "prometheus_port", DEFAULT_PROMETHEUS_PORT),
            scrape_interval_s=getattr(args, "scrape_interval", DEFAULT_SCRAPE_INTERVAL_S),
        ) if getattr(args, "monitoring", False) else None,
        api=None if getattr(args, "no_api", True) else ApiOptions(
            port=getattr(args, "api_port", DEFAULT_API_PORT), key_file=getattr(args, "api_key_file", None),
            workers=api_workers(getattr(args, "api_workers", None))),
    )
