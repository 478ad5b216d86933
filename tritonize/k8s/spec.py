"""`K8sSpec`: every decision behind the manifests, as data; the templates only lay it out."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..serving.health import HEALTH_FILE
from .options import CONTAINER_SECURITY, GRACE_S, PRESTOP_S


@dataclass(frozen=True)
class Probe:
    """One container probe: the health script (exec) or an HTTP GET, and its timing."""

    period_s: int
    timeout_s: int
    failure_threshold: int
    command: tuple[str, ...] = ()
    http_path: str = ""
    port: int | str = "http"

    @property
    def manifest(self) -> dict[str, Any]:
        action: dict[str, Any] = (
            {"exec": {"command": list(self.command)}}
            if self.command
            else {"httpGet": {"path": self.http_path, "port": self.port}}
        )
        return action | {
            "periodSeconds": self.period_s,
            "timeoutSeconds": self.timeout_s,
            "failureThreshold": self.failure_threshold,
        }


@dataclass(frozen=True)
class Server:
    """The Triton container, as the plain Deployment or KServe runs it."""

    image: str
    args: tuple[str, ...]
    models_dir: str
    ports: dict[str, int]
    exposed: dict[str, int]  # the ports the pod declares: Triton's own HTTP only where it binds every interface
    startup: Probe
    readiness: Probe
    liveness: Probe
    resources: dict[str, dict[str, str]]
    mounts: tuple[dict[str, Any], ...]
    volumes: tuple[dict[str, Any], ...]
    storage_uri: str | None = None  # KServe only: what its storage initializer fetches into /mnt/models


@dataclass(frozen=True)
class Api:
    """`tritonize api` as a second container of the Triton pod: gRPC to Triton over localhost, the same
    repository read-only (copied out of the model image by an init container where the image holds it)."""

    image: str
    args: tuple[str, ...]
    port: int
    readiness: Probe
    resources: dict[str, dict[str, str]]
    mounts: tuple[dict[str, Any], ...]
    volumes: tuple[dict[str, Any], ...] = ()  # besides the pod's own
    copy_from: str | None = None
    # It writes nothing: a read-only root filesystem on top of the pod's container settings.
    security: dict[str, Any] = field(default_factory=lambda: CONTAINER_SECURITY | {"readOnlyRootFilesystem": True})  # the model image the init container copies /models out of


@dataclass(frozen=True)
class Fetch:
    """The init container of the `init` source: downloads and unpacks the repository into an emptyDir."""

    url: str
    sha256: str
    script: str
    health_file: str = HEALTH_FILE  # what the archive must hold at its top


@dataclass(frozen=True)
class K8sSpec:
    """Every decision behind the manifests; the templates only lay it out."""

    app: str  # the Deployment, Service, HPA and PDB name
    namespace: str | None
    models: tuple[str, ...]  # the ensembles clients call
    device: str
    source: str
    repository: Path
    digest: str  # sha256 of the repository's files: image tag, pod annotation
    serving_image: str  # NVIDIA's Triton + what the steps need (docker/Dockerfile)
    model_image: str | None  # source image: the serving image with the repository at /models
    labels: dict[str, str]
    selector: dict[str, str]
    min_replicas: int
    max_replicas: int
    target_queue_ms: float
    gpus: int
    service_type: str
    server: Server
    kserve: Server
    fetch: Fetch | None
    queue_rule: dict[str, Any]
    api: Api | None
    tolerations: tuple[dict[str, str], ...] = ()
    security: dict[str, Any] = field(default_factory=dict)
    pod_security: dict[str, Any] = field(default_factory=dict)
    volume_group: int | None = None  # the Deployment pod's fsGroup: the group that may write its claims
    grace_s: int = GRACE_S
    prestop_s: int = PRESTOP_S

    @property
    def image(self) -> str:
        """What the Deployment runs."""
        return self.server.image

    @property
    def pod_security_context(self) -> dict[str, Any]:
        """The Deployment pod's securityContext: a claim the server writes is made writable by its group."""
        if self.volume_group is None:
            return dict(self.pod_security)
        return self.pod_security | {"fsGroup": self.volume_group, "fsGroupChangePolicy": "OnRootMismatch"}

    @property
    def container_security(self) -> dict[str, Any]:
        """Pod and container settings in one container securityContext (KServe's model container)."""
        return self.pod_security | self.security

    @property
    def target_quantity(self) -> str:
        """The HPA's averageValue: a Kubernetes quantity (12.5 ms is "12500m")."""
        if float(self.target_queue_ms).is_integer():
            return str(int(self.target_queue_ms))
        return f"{round(self.target_queue_ms * 1000)}m"
