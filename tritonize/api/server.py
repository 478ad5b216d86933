"""`tritonize api`: the HTTP API on uvicorn, in front of a running Triton (gRPC).

`deploy.py local up` starts it beside the local server (supervised); the compose file and the Kubernetes
render run it as a second container. Bound to loopback unless told otherwise, as the server is.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path

from ..errors import TritonizeError
from ..flags import options_from
from .remote_images import FETCH_TIMEOUT_S, image_hosts
from .state import (
    API_KEY_ENV,
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_CLIENT_BATCH,
    DEFAULT_MAX_CONCURRENT,
    DEFAULT_PORT,
    MULTIPROCESS_ENV,
    ApiSettings,
)


def api_key(value: str | None, key_file: Path | None) -> str | None:
    """The key from --api-key-file, else --api-key, else $TRITONIZE_API_KEY; None: no key asked."""
    if key_file is not None:
        try:
            key = key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise TritonizeError(f"cannot read the API key file {key_file}: {exc.strerror}") from None
        if not key:
            raise TritonizeError(f"the API key file {key_file} is empty")
        return key
    return value or os.environ.get(API_KEY_ENV) or None


WORKERS_ENV = "TRITONIZE_API_WORKERS"  # --workers where no flag is given (compose sets it from API_WORKERS)
# --enable-chunked-processing and --chunk-overlap where no flag is given ("1"/"true" turns chunking on).
CHUNKED_ENV, CHUNK_OVERLAP_ENV = "TRITONIZE_API_CHUNKED_PROCESSING", "TRITONIZE_API_CHUNK_OVERLAP"
COALESCE_ENV = "TRITONIZE_API_COALESCE"  # --coalesce where no flag is given ("0"/"false" turns it off)


def env_flag(name: str, default: bool = False) -> bool:
    value = os.environ.get(name, "").strip().lower()
    return value in ("1", "true", "yes", "on") if value else default


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repository", "-r", type=Path, default=Path("triton_repo"), help="the served repository")
    p.add_argument("--grpc-url", default="127.0.0.1:8001", help="Triton's gRPC endpoint (default: %(default)s)")
    p.add_argument("--http-url", default=None, metavar="HOST:PORT",
                   help="Triton's HTTP endpoint: the routes' inferences go there, on kept connections, for about a "
                        "third of gRPC's CPU a call (docs/api.md); `deploy.py local up` and the Kubernetes render "
                        "set it, the compose file cannot: Triton's HTTP port binds its own container's loopback "
                        "(default: none, inferences over gRPC too)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="(default: %(default)s)")
    p.add_argument("--api-key", default=None, help=f"require `Authorization: Bearer KEY` (also ${API_KEY_ENV})")
    p.add_argument("--api-key-file", type=Path, default=None, help="read the key from a file")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="larger bodies get 413 (default: %(default)s, text-embeddings-inference's 2 MB)")
    p.add_argument("--max-client-batch-size", type=int, default=DEFAULT_MAX_CLIENT_BATCH,
                   help="texts per request; more get 413 (default: %(default)s)")
    p.add_argument("--max-concurrent-requests", type=int, default=DEFAULT_MAX_CONCURRENT,
                   help="requests in flight before 429, over all workers (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None,
                   help="processes answering on the one port: one spends about 0.13-0.3 ms of a core on a "
                        "single-text request under load (docs/api.md), so past a few thousand requests/s it needs "
                        f"more; metrics are summed over them (default: ${WORKERS_ENV}, else what `tritonize tune "
                        "--api-workers` measured and wrote into the repository, else 1)")
    p.add_argument("--enable-chunked-processing", action=argparse.BooleanOptionalAction, default=env_flag(CHUNKED_ENV),
                   help="embed a text longer than the model reads as max-length windows, pooled by their tokens, where "
                        "a request does not say (its `enable_chunked_processing`); off: such a text is cut at its end "
                        f"(default: ${CHUNKED_ENV}, else off; docs/api.md)")
    p.add_argument("--chunk-overlap", type=int, default=int(os.environ.get(CHUNK_OVERLAP_ENV) or 0),
                   help=f"tokens each window shares with the one before it (default: ${CHUNK_OVERLAP_ENV}, else 0)")
    p.add_argument("--coalesce", action=argparse.BooleanOptionalAction, default=env_flag(COALESCE_ENV, True),
                   help="send requests to one model that arrive together to Triton as one request of many rows, "
                        "each answered with its own rows (a request that finds the model idle does not wait; "
                        f"docs/api.md) (default: ${COALESCE_ENV}, else on)")
    p.add_argument("--allow-image-hosts", default="", metavar="HOST[,HOST...]",
                   help="fetch the images a request gives by http(s) URL from these hosts (host names or host:port, "
                        "matched exactly; a name alone is the scheme's own port): no redirects followed, "
                        f"{FETCH_TIMEOUT_S:g} s each, a request's images no more than --max-body-bytes in all "
                        "(default: none; a URL is refused and clients send the images' bytes)")


def settings_from(args: argparse.Namespace) -> ApiSettings:
    if args.workers is None:
        args.workers = workers_default(Path(args.repository))
    for flag in ("max_body_bytes", "max_client_batch_size", "max_concurrent_requests", "port", "workers"):
        if getattr(args, flag) <= 0:
            raise TritonizeError(f"--{flag.replace('_', '-')} must be positive")
    if args.chunk_overlap < 0:
        raise TritonizeError("--chunk-overlap must be 0 or more")
    if args.http_url and not re.fullmatch(r"(http://)?[^/:\s]+:\d+/?", args.http_url):
        raise TritonizeError(f"--http-url {args.http_url!r}: give Triton's HTTP endpoint as host:port (plain HTTP)")
    return options_from(ApiSettings, args, renamed={"chunked_processing": "enable_chunked_processing"},
                        repository=Path(args.repository), api_key=api_key(args.api_key, args.api_key_file),
                        image_hosts=image_hosts(args.allow_image_hosts))


def workers_default(repository: Path) -> int:
    """--workers where no flag gives it: $TRITONIZE_API_WORKERS, else the most any served model's tune measured
    (its manifest's api_workers), else one."""
    from ..manifest import find_manifests

    given = os.environ.get(WORKERS_ENV, "").strip()
    if given:
        if not given.isdigit():
            raise TritonizeError(f"${WORKERS_ENV} must be a whole number of processes (got {given!r})")
        return int(given)
    measured = [m.options.api_workers for m in find_manifests(repository) if m.options.api_workers]
    return max(measured, default=1)


# How the API runs on uvicorn: its event loop and HTTP parser in C where installed (uvloop, httptools: the api
# extra), no access log, and no rewriting of the client's address from proxy headers (nothing here reads it).
# The bench's empty endpoint runs the same way (bench/asgi_floor.py).
UVICORN = {"loop": "auto", "http": "auto", "log_level": "warning", "access_log": False,
           "proxy_headers": False, "timeout_graceful_shutdown": 10}


def serve(settings: ApiSettings) -> None:
    """One process, or `workers` processes that uvicorn starts on one socket (and starts again if one dies)."""
    import uvicorn

    from .app import create_app

    run = {**UVICORN, "host": settings.host, "port": settings.port}
    if settings.workers == 1:
        uvicorn.run(create_app(settings), **run)
        return
    with tempfile.TemporaryDirectory(prefix="tritonize-api-metrics-") as metrics:
        os.environ[MULTIPROCESS_ENV] = metrics  # before any worker imports prometheus_client
        os.environ[WORKER_SETTINGS_ENV] = json.dumps(worker_settings(settings))
        if settings.api_key:
            os.environ[API_KEY_ENV] = settings.api_key  # the key by the variable `tritonize api` reads, not in JSON
        uvicorn.run(f"{__name__}:worker_app", factory=True, workers=settings.workers, **run)


WORKER_SETTINGS_ENV = "TRITONIZE_API_WORKER_SETTINGS"


def worker_settings(settings: ApiSettings) -> dict:
    """What each worker runs with: the in-flight bound shared out among them, so that all of them together hold
    no more than asked; the key left out (it travels in API_KEY_ENV)."""
    each = dataclasses.replace(settings, max_concurrent_requests=math.ceil(settings.max_concurrent_requests
                                                                         / settings.workers))
    fields = {k: v for k, v in dataclasses.asdict(each).items() if k != "api_key"}
    return {**fields, "repository": str(settings.repository)}


def worker_app():
    """A worker's app, from the settings `serve` left in its environment (uvicorn imports this by name)."""
    from .app import create_app

    return create_app(settings_of_worker(os.environ[WORKER_SETTINGS_ENV]))


def settings_of_worker(text: str) -> ApiSettings:
    """worker_settings as JSON -> the settings again (JSON's lists back to tuples, the key from API_KEY_ENV)."""
    fields = json.loads(text)
    return ApiSettings(**{**fields, "repository": Path(fields["repository"]),
                          "image_hosts": tuple(fields["image_hosts"]), "api_key": os.environ.get(API_KEY_ENV) or None})


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("api", help="serve OpenAI, Cohere/Jina and text-embeddings-inference routes over Triton")
    add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    from ..manifest import read_manifests

    read_manifests(settings.repository)  # a missing or foreign repository: one line, before the port opens
    print(f"tritonize API on http://{settings.host}:{settings.port} -> Triton gRPC {settings.grpc_url}"
          + (f", inferences over HTTP {settings.http_url}" if settings.http_url else "")
          + (" (API key required)" if settings.api_key else ""), file=sys.stderr)
    serve(settings)
    return 0
