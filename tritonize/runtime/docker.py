"""`deploy.py docker up|down|status|logs`: the serving container (container.py), through the docker SDK.

The container is described as data first (`container_spec`), so what `up`
launches can be read and tested without an engine. `DockerRuntime` only
connects, builds or pulls the image, runs that spec and waits for readiness.

The container serves the repository's `config.pbtxt` files (native
onnxruntime / TensorRT backends) unless `--config-name` says otherwise (the
fused step, `configs/fused.pbtxt`, is selected that way).

The container's settings (ports, shm size, ulimits, healthcheck, watchdog,
stop grace, restart policy) are container.py's, from which docker-compose.yml
is rendered too, so what `deploy.py docker` proves holds for `docker compose
up` (which tests/container/test_docker_compose.py also runs).
The `docker` SDK is imported lazily so that building the CLI stays fast.
"""

from __future__ import annotations

import argparse
import io
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..console import err
from ..errors import TritonizeError
from . import process
from .base import (
    Endpoints,
    ModelState,
    Runtime,
    ServerOptions,
    ServerStatus,
    drain,
    http_get,
    repository_models,
    require_repository,
    wait_ready,
)
from .container import (
    BASE_LABEL,
    CONTAINER_PORTS,
    DEFAULT_SHM_SIZE,
    DEFAULT_TRITON_RELEASE,
    ENVIRONMENT,
    EXIT_TIMEOUT_S,
    HEALTHCHECK,
    IMAGE_REPOSITORY,
    LABEL_PREFIX,
    MIN_TRITON_RELEASE,
    MODELS_DIR,
    RESTART_POLICY,
    SECURITY_OPT,
    STOP_GRACE_S,
    ULIMITS,
    base_image,
    default_image,
    duration_s,
    health_command,
    health_digest,
    image_pins,
    pins_label,
    release_is_patched,
    release_key,
    render_compose,
    render_dockerfile,
    triton_command,
)

CONTAINER_NAME = "tritonize-triton"


# --------------------------------------------------------------------------- spec


@dataclass(frozen=True)
class GpuRequest:
    """Which GPUs the container gets: all (count -1), a count, or device ids."""

    count: int = -1
    device_ids: tuple[str, ...] = ()


def parse_gpus(value: str) -> GpuRequest | None:
    """`all`, `none`, a count (`2`) or device ids (`device=0,1`); None means CPU only."""
    text = value.strip().lower()
    if text in ("all", "-1"):
        return GpuRequest()
    if text in ("none", "0", ""):
        return None
    if text.startswith("device="):
        ids = tuple(i.strip() for i in text.removeprefix("device=").split(",") if i.strip())
        if ids:
            return GpuRequest(count=0, device_ids=ids)
    elif text.isdigit():
        return GpuRequest(count=int(text))
    raise ValueError(f"--gpus takes all, none, a count or device=ID[,ID]; got {value!r}")


@dataclass
class DockerOptions:
    """Container-only options (`deploy docker` flags)."""

    image: str | None = None  # default: tritonize-tritonserver:<release>-py3, built here
    release: str = DEFAULT_TRITON_RELEASE
    build: bool = False  # rebuild even if the image exists
    pull: bool = False  # pull `image` from its registry instead of building
    gpus: str = "all"
    shm_size: str = DEFAULT_SHM_SIZE
    container_name: str = CONTAINER_NAME
    base_image: str | None = None  # build on this instead of NVIDIA's image (the test stand-in)
    config_name: str | None = None  # serve configs/<name>.pbtxt instead of config.pbtxt
    network: str | None = None  # the container's network ("host": Triton binds the host's ports itself)
    build_network: str | None = None  # the build's network (pip needs one that reaches PyPI)
    ulimits: tuple[tuple[str, int, int], ...] = ULIMITS  # --ulimit replaces one by name

    @property
    def resolved_image(self) -> str:
        return self.image or default_image(self.release)

    @property
    def host_network(self) -> bool:
        return self.network == "host"


@dataclass(frozen=True)
class ContainerSpec:
    """Everything `docker run` needs, as plain data."""

    image: str
    command: tuple[str, ...]
    name: str
    repository: Path  # absolute host path, mounted read-only at MODELS_DIR
    ports: dict[str, tuple[str, int]]  # "8000/tcp" -> (host address, host port)
    gpus: GpuRequest | None
    shm_size: str
    labels: dict[str, str] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    ulimits: tuple[tuple[str, int, int], ...] = ULIMITS
    security_opt: tuple[str, ...] = SECURITY_OPT
    restart_policy: dict[str, Any] = field(default_factory=lambda: {"Name": RESTART_POLICY})
    healthcheck_test: tuple[str, ...] = HEALTHCHECK["test"]
    network: str | None = None

    def healthcheck(self) -> dict[str, Any]:
        """HEALTHCHECK's settings in the engine's units (nanoseconds), with this container's test."""
        ns = 1_000_000_000
        return {
            "test": ["CMD", *self.healthcheck_test],
            "interval": duration_s(HEALTHCHECK["interval"]) * ns,
            "timeout": duration_s(HEALTHCHECK["timeout"]) * ns,
            "start_period": duration_s(HEALTHCHECK["start_period"]) * ns,
            "retries": HEALTHCHECK["retries"],
        }

    def run_kwargs(self) -> dict[str, Any]:
        """Exactly the keyword arguments for `client.containers.run(...)`."""
        from docker.types import DeviceRequest, Mount, Ulimit

        kwargs: dict[str, Any] = {
            "image": self.image,
            "command": list(self.command),
            "name": self.name,
            "detach": True,
            "labels": dict(self.labels),
            "environment": dict(self.environment),
            # A bind Mount (unlike `volumes=`) fails if the source is missing
            # instead of creating an empty, root-owned directory.
            "mounts": [Mount(target=MODELS_DIR, source=str(self.repository), type="bind", read_only=True)],
            "ports": dict(self.ports),
            "shm_size": self.shm_size,
            "ulimits": [Ulimit(name=n, soft=s, hard=h) for n, s, h in self.ulimits],
            "security_opt": list(self.security_opt),
            "restart_policy": dict(self.restart_policy),
            "stop_signal": "SIGTERM",
            "healthcheck": self.healthcheck(),
        }
        if self.network == "host":
            kwargs["network_mode"] = "host"
            del kwargs["ports"]  # nothing is published: Triton binds the host's ports (triton_command's address)
        elif self.network:
            kwargs["network"] = self.network
        if self.gpus is not None:
            request = (
                DeviceRequest(device_ids=list(self.gpus.device_ids), capabilities=[["gpu"]])
                if self.gpus.device_ids
                else DeviceRequest(count=self.gpus.count, capabilities=[["gpu"]])
            )
            kwargs["device_requests"] = [request]
        return kwargs


def bind_address(host: str) -> str:
    """Docker publishes on an IP address; `localhost` means loopback."""
    return "127.0.0.1" if host in ("localhost", "") else host


def reach_address(host: str) -> str:
    """Where this machine reaches a port published on `host`."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "localhost", "") else host


def container_spec(options: ServerOptions, docker_options: DockerOptions) -> ContainerSpec:
    """The container for `options.repository`, built from options alone (no engine needed)."""
    release_key(docker_options.release)
    repository = Path(options.repository).expanduser().resolve()
    host = bind_address(options.host)
    if docker_options.host_network:
        ports = {"http": options.http_port, "grpc": options.grpc_port, "metrics": options.metrics_port}
        command = triton_command(options, ports=ports, config_name=docker_options.config_name, address=host)
    else:
        ports = CONTAINER_PORTS
        command = triton_command(options, config_name=docker_options.config_name)
    return ContainerSpec(
        image=docker_options.resolved_image,
        command=command,
        name=docker_options.container_name,
        repository=repository,
        ports={
            f"{CONTAINER_PORTS['http']}/tcp": (host, options.http_port),
            f"{CONTAINER_PORTS['grpc']}/tcp": (host, options.grpc_port),
            f"{CONTAINER_PORTS['metrics']}/tcp": (host, options.metrics_port),
        },
        gpus=parse_gpus(docker_options.gpus),
        shm_size=docker_options.shm_size,
        labels={
            f"{LABEL_PREFIX}.managed": "true",
            f"{LABEL_PREFIX}.repository": str(repository),
            f"{LABEL_PREFIX}.release": docker_options.release,
        },
        environment=dict(ENVIRONMENT),
        ulimits=docker_options.ulimits,
        healthcheck_test=health_command(ports["http"]),
        network=docker_options.network,
    )


# --------------------------------------------------------------------------- engine


def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _short_reason(exc: BaseException) -> str:
    text = str(exc)
    for needle, reason in (
        ("FileNotFoundError", "no socket there"),
        ("No such file or directory", "no socket there"),
        ("PermissionError", "permission denied"),
        ("Permission denied", "permission denied"),
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
    ):
        if needle in text:
            return reason
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:120]


def no_engine_error(exc: BaseException) -> TritonizeError:
    reason = _short_reason(exc)
    hint = "run Triton without Docker: python deploy.py local up"
    if reason == "permission denied":
        hint = "add your user to the 'docker' group, or " + hint
    return TritonizeError(f"no Docker engine could be reached at {_engine_address()} ({reason})", hint=hint)


def connect(timeout_s: int = 10, work_timeout_s: int = 600) -> Any:
    """A docker client that has answered a ping; a clear error when there is no engine."""
    import docker
    import requests

    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise no_engine_error(exc) from None
    client.api.timeout = work_timeout_s  # builds and pulls stay quiet for long stretches
    return client


class _Progress:
    """One live status line on a terminal; an occasional plain line otherwise (CI logs)."""

    def __init__(self, title: str, every_s: float = 10.0):
        self.title = title
        self.every_s = every_s
        self._status: Any = None
        self._last_print = 0.0
        self._start = 0.0

    def __enter__(self) -> _Progress:
        self._start = time.perf_counter()
        if err.is_terminal:
            self._status = err.status(f"{self.title}...")
            self._status.__enter__()
        else:
            err.print(f"{self.title}...")
        return self

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(f"{self.title}: {text}")
        elif time.perf_counter() - self._last_print >= self.every_s:
            self._last_print = time.perf_counter()
            err.print(f"  {text}", markup=False, highlight=False)

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)
        if exc_type is None:
            err.print(f"[green]✓[/] {self.title} [dim]({time.perf_counter() - self._start:.1f}s)[/]")


def _follow(stream: Iterable[dict[str, Any]], progress: _Progress, what: str) -> None:
    """Show a build or pull stream as progress; raise on its first error."""
    layers: dict[str, str] = {}
    for chunk in stream:
        if "error" in chunk:
            detail = str(chunk.get("error", "")).strip().splitlines()[-1:] or [""]
            raise TritonizeError(f"{what} failed: {detail[0]}", hint="check network access to nvcr.io and PyPI")
        if "stream" in chunk:
            line = str(chunk["stream"]).strip()
            if line.startswith("Step ") or line.startswith("Successfully"):
                progress.update(line[:100])
        elif "status" in chunk:
            if "id" in chunk:
                layers[chunk["id"]] = str(chunk["status"])
                done = sum(s in ("Pull complete", "Already exists") for s in layers.values())
                progress.update(f"{done}/{len(layers)} layers")
            else:
                progress.update(str(chunk["status"])[:100])


class DockerRuntime(Runtime):
    """Triton in NVIDIA's container, started and stopped through the docker SDK."""

    def __init__(self, options: ServerOptions, docker_options: DockerOptions | None = None):
        super().__init__(options)
        self.docker_options = docker_options or DockerOptions()

    # -- helpers
    def spec(self) -> ContainerSpec:
        return container_spec(self.options, self.docker_options)

    def _container(self, client: Any) -> Any | None:
        from docker.errors import NotFound

        try:
            return client.containers.get(self.docker_options.container_name)
        except NotFound:
            return None

    def _ensure_image(self, client: Any, image: str) -> None:
        from docker.errors import ImageNotFound
        from docker.utils import parse_repository_tag

        opts = self.docker_options
        if opts.pull:
            repository, tag = parse_repository_tag(image)
            with _Progress(f"pulling {image}") as progress:
                _follow(client.api.pull(repository, tag=tag or "latest", stream=True, decode=True), progress, "pull")
            return
        base = opts.base_image or base_image(opts.release)
        if not opts.build:
            try:
                labels = client.images.get(image).labels or {}
                if opts.image or (labels.get(f"{LABEL_PREFIX}.pins") == pins_label(image_pins())
                                  and labels.get(f"{LABEL_PREFIX}.health-sha256") == health_digest()
                                  and labels.get(BASE_LABEL) == base):
                    return
                err.print(f"{image} was built from another lock, base image or script; rebuilding")
            except ImageNotFound:
                pass
        with _Progress(f"building {image} from {base}") as progress:
            dockerfile = render_dockerfile(opts.release).encode()
            stream = client.api.build(
                fileobj=io.BytesIO(dockerfile),
                tag=image,
                buildargs={"TRITON_RELEASE": opts.release, "BASE_IMAGE": base},
                network_mode=opts.build_network,
                rm=True,
                forcerm=True,
                decode=True,
                timeout=None,
            )
            _follow(stream, progress, "image build")

    def _last_event(self, container: Any) -> str:
        try:
            tail = container.logs(tail=40).decode("utf-8", "replace").splitlines()
        except Exception:  # noqa: BLE001 - progress text only
            return ""
        for line in reversed(tail):
            if "loading:" in line or "successfully loaded" in line or "failed to load" in line:
                return line.split("] ", 1)[-1][:80]
        return ""

    # -- Runtime
    def up(self) -> Endpoints:
        from docker.errors import APIError

        require_repository(self.options.repository)
        if self.docker_options.pull and not self.docker_options.image:
            # The default name is only ever built here; pulling it could fetch a stranger's image.
            raise TritonizeError("--pull needs --image REGISTRY/NAME:TAG", hint="or drop --pull to build the image here")
        spec = self.spec()
        if not release_is_patched(self.docker_options.release):
            err.print(
                f"[yellow]warning:[/] Triton {self.docker_options.release} predates {MIN_TRITON_RELEASE} and lacks "
                "the fixes for the 2025 Python-backend and HTTP-server CVEs"
            )
        client = connect()
        self._ensure_image(client, spec.image)

        stale = self._container(client)
        if stale is not None:
            if (stale.labels or {}).get(f"{LABEL_PREFIX}.managed") != "true":
                raise TritonizeError(
                    f"a container named {spec.name} exists and was not started by tritonize",
                    hint="choose another --container-name",
                )
            err.print(f"replacing container {spec.name} ({stale.status})")
            stale.remove(force=True)
        try:
            container = client.containers.run(**spec.run_kwargs())
        except APIError as exc:
            raise self._run_error(exc) from None

        endpoints = Endpoints(
            reach_address(bind_address(self.options.host)),
            self.options.http_port,
            self.options.grpc_port,
            self.options.metrics_port,
        )

        def is_alive() -> bool:
            container.reload()
            return container.status in ("created", "running")

        last = {"t": 0.0, "event": ""}
        with _Progress(f"waiting for Triton in {spec.name} to load the models") as progress:

            def on_tick(elapsed: float) -> None:
                if elapsed - last["t"] >= 2.0:
                    last["t"] = elapsed
                    last["event"] = self._last_event(container) or last["event"]
                progress.update(f"{elapsed:.0f}s {last['event']}".rstrip())

            try:
                wait_ready(endpoints, self.options.timeout_s, is_alive, on_tick)
            except TritonizeError as exc:
                try:
                    log = container.logs(tail=300).decode("utf-8", "replace")
                    for line in process.error_lines(log):
                        err.print(f"  {line}", markup=False, highlight=False)
                    container.stop(timeout=10)  # no restart loop; kept for `logs`
                except APIError:
                    pass  # already gone; the error below still holds
                raise TritonizeError(
                    f"{exc.message} (container {spec.name})",
                    hint="full log: python deploy.py docker logs; remove it: python deploy.py docker down",
                ) from None
        return endpoints

    def _run_error(self, exc: Any) -> TritonizeError:
        text = str(getattr(exc, "explanation", None) or exc)
        gpu_markers = ("could not select device driver", "nvidia-container-cli", "unknown or invalid runtime name")
        if any(marker in text for marker in gpu_markers):
            return TritonizeError(
                f"the engine cannot give the container a GPU ({text.strip()[:160]})",
                hint="install the NVIDIA Container Toolkit, or serve on CPU: --gpus none "
                "with a repository generated with --device cpu",
            )
        if "port is already allocated" in text or "address already in use" in text:
            return TritonizeError(
                f"a port is already in use ({text.strip()[:160]})",
                hint="stop what holds it, or choose --http-port/--grpc-port/--metrics-port",
            )
        return TritonizeError(f"the container could not start: {text.strip()[:200]}")

    def down(self, timeout_s: float | None = None) -> bool:
        timeout_s = EXIT_TIMEOUT_S if timeout_s is None else timeout_s
        client = connect()
        container = self._container(client)
        if container is None:
            err.print(f"no container named {self.docker_options.container_name}")
            return False
        # Triton 2.51 refuses new requests to every model on SIGTERM, the steps of an ensemble included: the
        # requests already in flight finish first (drain), then SIGTERM, then SIGKILL after the grace period.
        if container.status == "running":
            waited = drain(self._published_endpoints(container), timeout_s)
            err.print(f"drained in {waited:.1f}s", markup=False, highlight=False)
        container.stop(timeout=max(int(timeout_s) + STOP_GRACE_S - EXIT_TIMEOUT_S, STOP_GRACE_S))
        container.remove()
        err.print(f"[green]✓[/] container {self.docker_options.container_name} stopped and removed")
        return True

    def status(self) -> ServerStatus:
        client = connect()
        container = self._container(client)
        name = self.docker_options.container_name
        if container is None:
            return ServerStatus(running=False, ready=False, detail=f"no container named {name}")
        state = container.attrs.get("State", {})
        health = (state.get("Health") or {}).get("Status", "")
        detail = f"container {name}: {container.status}" + (f", {health}" if health else "")
        if container.status != "running":
            return ServerStatus(running=False, ready=False, detail=detail)
        endpoints = self._published_endpoints(container)
        ready = http_get(f"{endpoints.http}/v2/health/ready", timeout=2.0)[0] == 200
        models: list[ModelState] = repository_models(endpoints)
        return ServerStatus(running=True, ready=ready, endpoints=endpoints, models=models, detail=detail)

    def _published_endpoints(self, container: Any) -> Endpoints:
        """The endpoints as the engine published them, whatever flags `status` got."""
        published = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}

        def host_port(port: int, fallback: int) -> tuple[str, int]:
            bindings = published.get(f"{port}/tcp") or []
            if not bindings:
                return reach_address(bind_address(self.options.host)), fallback
            return reach_address(bindings[0].get("HostIp", "")), int(bindings[0]["HostPort"])

        if (container.attrs.get("HostConfig") or {}).get("NetworkMode") == "host":
            flags = dict(arg[2:].split("=", 1) for arg in container.attrs["Config"]["Cmd"] if "=" in arg)
            return Endpoints(reach_address(flags.get("http-address", "")), int(flags["http-port"]),
                             int(flags["grpc-port"]), int(flags["metrics-port"]))
        host, http_port = host_port(CONTAINER_PORTS["http"], self.options.http_port)
        _, grpc_port = host_port(CONTAINER_PORTS["grpc"], self.options.grpc_port)
        _, metrics_port = host_port(CONTAINER_PORTS["metrics"], self.options.metrics_port)
        return Endpoints(host, http_port, grpc_port, metrics_port)

    def logs(self, tail: int | None = None) -> str:
        client = connect()
        container = self._container(client)
        if container is None:
            raise TritonizeError(
                f"no container named {self.docker_options.container_name}",
                hint="start one: python deploy.py docker up",
            )
        return container.logs(tail=tail if tail else "all").decode("utf-8", "replace")


# --------------------------------------------------------------------------- CLI


def parse_ulimit(value: str) -> tuple[str, int, int]:
    """`NAME=SOFT[:HARD]` (-1: unlimited), as `docker run --ulimit` takes it."""
    name, sep, limits = value.partition("=")
    soft, _, hard = limits.partition(":")
    try:
        if not sep or not name.isalpha():
            raise ValueError
        return name, int(soft), int(hard or soft)
    except ValueError:
        raise ValueError(f"--ulimit takes NAME=SOFT[:HARD], e.g. memlock=8388608; got {value!r}") from None


def with_ulimits(values: list[str]) -> tuple[tuple[str, int, int], ...]:
    """ULIMITS with the given ones replacing those of the same name (a host that cannot raise memlock, say)."""
    given = {name: (name, soft, hard) for name, soft, hard in map(parse_ulimit, values)}
    return tuple(given.pop(name, (name, soft, hard)) for name, soft, hard in ULIMITS) + tuple(given.values())


def _checked_by(parse: Callable[[str], Any]) -> Callable[[str], str]:
    """An argparse type that keeps the text and refuses, in parse's words, what parse cannot read."""

    def check(value: str) -> str:
        try:
            parse(value)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return value

    return check


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = DockerOptions()
    g = parser.add_argument_group("container")
    g.add_argument("--release", default=d.release, help=f"Triton release to build on (default: %(default)s; "
                   f"{MIN_TRITON_RELEASE}+ has the 2025 CVE fixes)")
    g.add_argument("--image", default=None, help=f"serving image (default: {IMAGE_REPOSITORY}:<release>-py3, built here)")
    how = g.add_mutually_exclusive_group()
    how.add_argument("--build", action="store_true", help="rebuild the image even if it exists")
    how.add_argument("--pull", action="store_true", help="pull --image from its registry instead of building")
    g.add_argument("--gpus", type=_checked_by(parse_gpus), default=d.gpus,
                   help="all, none (CPU; generate with --device cpu), a count, or device=0,1 (default: %(default)s)")
    g.add_argument("--shm-size", default=d.shm_size, help="/dev/shm for Python-backend instances (default: %(default)s)")
    g.add_argument("--container-name", default=d.container_name, help="(default: %(default)s)")
    g.add_argument("--base-image", default=None,
                   help="build the serving image on this image instead of NVIDIA's (a test stand-in: docs/container.md)")
    g.add_argument("--config-name", default=None,
                   help="serve each model's configs/NAME.pbtxt (e.g. fused: the fused step, no onnxruntime backend; local in repositories written before that name)")
    g.add_argument("--network", default=None, help="the container's network; host: Triton binds --host's ports itself")
    g.add_argument("--build-network", default=None, help="the image build's network (pip must reach PyPI)")
    g.add_argument("--ulimit", type=_checked_by(parse_ulimit), action="append", default=[], metavar="NAME=SOFT[:HARD]",
                   help="replace one of the container's ulimits (default: memlock=-1, stack=67108864); a host "
                   "without CAP_SYS_RESOURCE cannot raise memlock")


def from_args(options: ServerOptions, args: argparse.Namespace) -> DockerRuntime:
    docker_options = DockerOptions(
        image=getattr(args, "image", None),
        release=getattr(args, "release", DEFAULT_TRITON_RELEASE),
        build=bool(getattr(args, "build", False)),
        pull=bool(getattr(args, "pull", False)),
        gpus=getattr(args, "gpus", "all"),
        shm_size=getattr(args, "shm_size", DEFAULT_SHM_SIZE),
        container_name=getattr(args, "container_name", CONTAINER_NAME),
        base_image=getattr(args, "base_image", None),
        config_name=getattr(args, "config_name", None),
        network=getattr(args, "network", None),
        build_network=getattr(args, "build_network", None),
        ulimits=with_ulimits(getattr(args, "ulimit", None) or []),
    )
    return DockerRuntime(options, docker_options)


if __name__ == "__main__":  # `python -m tritonize.runtime.docker [compose] > docker/Dockerfile | docker-compose.yml`
    import sys

    sys.stdout.write(render_compose() if sys.argv[1:] == ["compose"] else render_dockerfile())
