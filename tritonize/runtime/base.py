"""One small interface for every way of running Triton: up, down, status, logs, wait-ready."""

from __future__ import annotations

import abc
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import metrics_text, tasks
from ..errors import TritonizeError
from ..manifest import Manifest, find_manifests
from ..tasks.contract import TaskContract, sample_body


@dataclass
class ServerOptions:
    """Options common to every runtime. Security defaults: loopback, no model control."""

    repository: Path = Path("triton_repo")
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    run_dir: Path = Path(".run")
    timeout_s: float = 180.0
    model_control: str = "none"  # none | explicit (explicit enables the load/unload API)
    log_verbose: int = 0


# Triton's --metrics-config settings, for every runtime: latency summaries (p50 to p99.9 per model, over a
# sliding window) beside the cumulative counters, so that percentiles come from Triton's own metrics.
METRICS_CONFIG = ("summary_latencies=true",)


@dataclass(frozen=True)
class Endpoints:
    host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    http_host: str = ""  # where Triton's own HTTP port is reached, where not `host` (it stays on loopback)

    @property
    def http(self) -> str:
        return f"http://{self.http_host or self.host}:{self.http_port}"

    @property
    def grpc(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def metrics(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"


@dataclass
class ModelState:
    name: str
    version: str
    state: str  # READY / UNAVAILABLE / ...
    reason: str = ""


@dataclass
class ServerStatus:
    running: bool
    ready: bool
    endpoints: Endpoints | None = None
    models: list[ModelState] = field(default_factory=list)
    detail: str = ""
    health: str = ""  # the health check's outcome: a tiny inference through the ensemble
    restarts: int | None = None  # by the local supervisor; None when nothing supervises the server
    reloads: int | None = None  # steps the local supervisor reloaded alone (explicit model control)
    prometheus: str | None = None  # the URL of a Prometheus that scrapes this server (local --monitoring)
    monitoring: str = ""  # that Prometheus's state, in a line
    api: str | None = None  # the HTTP API beside the server (local): its URL and health, in a line


class Runtime(abc.ABC):
    """A place Triton runs: the local binary or a container. Every runtime has exactly these calls."""

    # Which model configuration it serves: None is each model's config.pbtxt,
    # a name N selects configs/N.pbtxt (Triton's --model-config-name).
    config_name: str | None = None

    def __init__(self, options: ServerOptions):
        self.options = options

    @abc.abstractmethod
    def up(self) -> Endpoints:
        """Start the server and return once /v2/health/ready answers 200."""

    @abc.abstractmethod
    def down(self, timeout_s: float | None = None) -> bool:
        """Stop gracefully (SIGTERM, in-flight requests drain; killed after timeout_s, default the
        runtime's own); False when nothing was running."""

    @abc.abstractmethod
    def status(self) -> ServerStatus:
        """Running, ready, endpoints and the models the server reports."""

    @abc.abstractmethod
    def logs(self, tail: int | None = None) -> str:
        """The server's log, the last `tail` lines (all with None)."""

    def switch(self, model: str | None = None):
        """Serve the version the repository now names for `model` (the only one, or the named one), refusing
        no request (`runtime/versions.py`)."""
        raise TritonizeError(
            f"{type(self).__name__} does not switch versions in a running server",
            hint="roll a new server over instead (docs/operate.md, 'Versions'): start it on the new repository, "
                 "wait for its health check, then stop the old one",
        )


    def controlled(self):
        """The running server under model control, for a canary or shadow rollout (`runtime/candidate.py`)."""
        raise TritonizeError(
            f"{type(self).__name__} does not load versions in a running server",
            hint="serve the repository with `deploy.py local up --model-control explicit`, or roll a new server over "
                 "(docs/operate.md, 'Versions')",
        )


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET without raising on HTTP errors; (0, b"") when nothing answers."""
    return _send(urllib.request.Request(url), timeout)


def http_post(url: str, body: bytes, headers: dict[str, str] | None = None, timeout: float = 2.0) -> tuple[int, bytes]:
    """POST without raising on HTTP errors; (0, b"") when nothing answers."""
    return _send(urllib.request.Request(url, data=body, method="POST", headers=headers or {}), timeout)


def _send(req: urllib.request.Request, timeout: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - loopback/user URL
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def wait_ready(
    endpoints: Endpoints,
    timeout_s: float,
    is_alive: Callable[[], bool],
    on_tick: Callable[[float], None] | None = None,
    poll_s: float = 0.05,
) -> None:
    """Poll /v2/health/ready until 200; fail fast if the process died."""
    start = time.monotonic()
    url = f"{endpoints.http}/v2/health/ready"
    while True:
        status, _ = http_get(url, timeout=1.0)
        if status == 200:
            return
        elapsed = time.monotonic() - start
        if not is_alive():
            raise TritonizeError("Triton exited before it became ready")
        if elapsed > timeout_s:
            raise TritonizeError(
                f"Triton was not ready after {timeout_s:.0f}s",
                hint="raise --timeout, or read the log with `deploy.py ... logs`",
            )
        if on_tick:
            on_tick(elapsed)
        time.sleep(poll_s)


def repository_models(endpoints: Endpoints, headers: dict[str, str] | None = None) -> list[ModelState]:
    """The repository index, as the running server reports it (`headers`: the admin key where the
    repository API is restricted)."""
    req = urllib.request.Request(f"{endpoints.http}/v2/repository/index", data=b"{}", method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=3.0) as resp:  # noqa: S310
            rows = json.loads(resp.read() or b"[]")
    except (urllib.error.URLError, OSError, ValueError):
        return []
    return [
        ModelState(r.get("name", ""), str(r.get("version", "")), r.get("state", ""), r.get("reason", ""))
        for r in rows
    ]


def require_repository(repository: Path) -> None:
    """A clear error for the commonest mistake: deploying before generating."""
    repository = Path(repository)
    if not repository.is_dir() or not any(p.is_dir() for p in repository.iterdir()):
        raise TritonizeError(
            f"no model repository at {repository}",
            hint="generate one first: python generate.py --model PATH",
        )


def served_manifests(repository: Path) -> list[Manifest]:
    """Every model's manifest for summaries, where they can be read: Triton serves a repository without one."""
    try:
        return find_manifests(repository)
    except TritonizeError:
        return []


def sample_api_curl(api_url: str, manifest: Manifest) -> str | None:
    """A curl for the API's route of the repository's task (OpenAI's embeddings, Cohere's rerank, ...)."""
    import json

    from ..api.task_routes import BY_TASK

    served = BY_TASK.get(manifest.model.head.task)
    if served is None:
        return None
    route, body = served.api_sample(manifest.name)
    return f"curl -s {api_url}{route} -H 'Content-Type: application/json' -d '{json.dumps(body)}'"


def sample_curl(endpoints: Endpoints, manifest: Manifest | None, url: str | None = None) -> str:
    """A curl that works for the model's task (JSON body, declared as such), to Triton's HTTP port or to `url`,
    the API's front for it."""
    model = manifest.name if manifest else "<model>"
    body = tasks.contract_of(manifest.model.head).sample_body() if manifest else sample_body(TaskContract.text_inputs)
    return (
        f"curl -s -X POST {url or endpoints.http}/v2/models/{model}/infer "
        f"-H 'Content-Type: application/json' -d '{body}'"
    )


# -- the server at work: both runtimes drain before SIGTERM

DRAIN_QUIET_S = 0.5  # nothing waiting in any step and nothing finished for this long: the server has drained


def activity(endpoints: Endpoints) -> tuple[int, int] | None:
    """(requests waiting in any step's queue, requests finished by any model so far), from Triton's metrics;
    None when the metrics do not answer."""
    code, body = http_get(endpoints.metrics, timeout=2.0)
    if code != 200:
        return None
    found = metrics_text.samples(body.decode(errors="replace"))
    waiting = sum(int(s.value) for s in metrics_text.select(found, "nv_inference_pending_request_count"))
    finished = sum(int(s.value) for name in ("nv_inference_request_success", "nv_inference_request_failure")
                   for s in metrics_text.select(found, name))
    return waiting, finished


def drain(endpoints: Endpoints, timeout_s: float, quiet_s: float = DRAIN_QUIET_S) -> float:
    """Wait (at most timeout_s) until nothing waits in any step and nothing has finished for quiet_s; the seconds
    spent.

    On SIGTERM Triton 2.51 refuses new requests to every model, the steps of an ensemble included, so a
    request still between two steps would fail: `down` lets the server go quiet first. A request that is
    computed in one step for longer than quiet_s, with nothing else moving, can still be caught.
    """
    start = time.monotonic()
    last, quiet_since = None, time.monotonic()
    while time.monotonic() - start < timeout_s:
        now = activity(endpoints)
        if now is None:
            break
        if now[0] or now != last:
            last, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= quiet_s:
            break
        time.sleep(0.05)
    return time.monotonic() - start
