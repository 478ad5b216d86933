"""The serving container as data (`container_spec`): what `deploy.py docker up` hands the engine, read and tested
without one. Its settings are container.py's, from which docker-compose.yml is rendered too."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import machine
from ..base import ServerOptions
from ..container import (
    CONTAINER_PORTS,
    DEFAULT_SHM_SIZE,
    DEFAULT_TRITON_RELEASE,
    ENVIRONMENT,
    HEALTHCHECK,
    LABEL_PREFIX,
    MODELS_DIR,
    RESTART_POLICY,
    SECURITY_OPT,
    ULIMITS,
    default_image,
    duration_s,
    health_command,
    release_key,
    triton_command,
)

CONTAINER_NAME = "tritonize-triton"


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
        # Published on the host's loopback only (below), so Triton's HTTP binds the container's every interface.
        command = triton_command(options, config_name=docker_options.config_name, http_address=None)
    return ContainerSpec(
        image=docker_options.resolved_image,
        command=command,
        name=docker_options.container_name,
        repository=repository,
        ports={
            # Triton's own HTTP port: this machine's loopback, whatever --host says (docs/reliability.md).
            f"{CONTAINER_PORTS['http']}/tcp": (machine.loopback(host), options.http_port),
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
