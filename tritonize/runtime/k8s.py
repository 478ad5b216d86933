"""`tritonize k8s render` (or `deploy.py k8s render`): Kubernetes manifests for a generated repository.

One folder, applied with `kubectl apply -k`: a Deployment running the serving image, a ClusterIP
Service, an autoscaling/v2 HorizontalPodAutoscaler on Triton's queue time, a PodDisruptionBudget;
beside them the prometheus-adapter rule that turns Triton's metrics into the HPA's metric, a KServe
InferenceService variant and, where the repository is baked into an image (the default), the
Dockerfile that bakes it. Nothing here talks to a cluster: tests validate the manifests offline
against Kubernetes' and KServe's schemas.

Every decision is made once, in `k8s_spec` (a `K8sSpec`); templates/k8s/ only lays it out. The
container runs what the compose file and `deploy.py docker` run (container.py: the serving image, its
command line and its health script, the real inference the reliability work settled on).

A repository of several models is one Deployment: every pod serves every model, and the probes run every
model's check. The objects are named after the model of a one-model repository, and after the
repository's folder where it holds several (a Service called after one model would mislead the clients
of the others); `--name` chooses, e.g. to keep the names of a deployment whose repository has grown.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..console import err, out
from ..errors import TritonizeError
from ..manifest import read_manifests
from ..paths import TEMPLATES_DIR
from ..serving.health import HEALTH_FILE
from ..spec import FIRST, MODEL, POST, TENSORRT_CACHE
from . import container
from .base import ServerOptions, require_repository

# -- where the repository comes from ------------------------------------------------------------
IMAGE, PVC, INIT = "image", "pvc", "init"
SOURCES = {
    IMAGE: "baked into an image built FROM the serving image (default: immutable; a new model is a new tag)",
    PVC: "a PersistentVolumeClaim holding the repository, mounted read-only",
    INIT: "an init container that fetches a .tar.gz of the repository from a URL",
}
KSERVE_MODELS_DIR = "/mnt/models"  # where KServe's storage initializer puts a storageUri's content
# KServe's Triton runtime (kserve-tritonserver) serves HTTP on 8080 and gRPC on 9000; the variant keeps them.
KSERVE_PORTS = {"http": 8080, "grpc": 9000, "metrics": container.CONTAINER_PORTS["metrics"]}

# -- the pod ----------------------------------------------------------------------------------------
GPU_RESOURCE = "nvidia.com/gpu"  # NVIDIA's device plugin (or the GPU operator)
# The repository and the Python-backend instances need this much besides shared memory.
DEFAULT_RESOURCES = {"cpu": ("2", "4Gi"), "gpu": ("2", "8Gi")}  # device -> (cpu request, memory)
DEFAULT_SHM_SIZE = "1Gi"  # compose's shm_size; a Memory emptyDir counts against the memory limit
PRESTOP_S = 10  # the endpoint leaves the Service (and ingress) before Triton gets SIGTERM
GRACE_S = PRESTOP_S + container.STOP_GRACE_S  # then Triton drains in-flight requests and exits
STARTUP_TENSORRT_S = 900  # a load that finds no engine cached builds it (one profile over every bucket)
TRT_CACHE_VOLUME = "trt-cache"  # TensorRT's engine cache, at spec.TENSORRT_CACHE
PROBE_PERIOD_S = 10
PROBE_TIMEOUT_S = container.HEALTH_TIMEOUT_S + 2  # a health check's own timeout, and 2 s to spare

# -- the API beside Triton ---------------------------------------------------------------------------
API_PORT = 8080  # docker/api.Dockerfile's; on the pod beside Triton's own (KServe's variant leaves it out)
API_IMAGE = "tritonize-api"  # built from docker/api.Dockerfile, tagged with the package version
API_MODELS_DIR = "/models"
API_RESOURCES = {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}}
# Every container: no privilege escalation, no capabilities (the restricted Pod Security Standard).
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}

# -- autoscaling ------------------------------------------------------------------------------------
QUEUE_METRIC = "triton_queue_ms_per_request"  # the adapter exposes it; the HPA asks for it
DEFAULT_TARGET_QUEUE_MS = 50.0  # NVIDIA's Triton Helm example scales at 50 ms of queue time
RATE_WINDOW = "2m"  # at least four scrapes at Prometheus' usual 30 s
DEFAULT_MIN_REPLICAS = 2  # one replica can go (drain, rollout) while the other serves
DEFAULT_MAX_REPLICAS = 6

# -- files ------------------------------------------------------------------------------------------
DEPLOYMENT, SERVICE, HPA, PDB = "deployment.yaml", "service.yaml", "hpa.yaml", "pdb.yaml"
KUSTOMIZATION = "kustomization.yaml"
ADAPTER_RULES = "prometheus-adapter-rules.yaml"
INFERENCE_SERVICE = "kserve-inferenceservice.yaml"
DOCKERFILE = "Dockerfile"
APPLIED = (DEPLOYMENT, SERVICE, HPA, PDB)  # what `kubectl apply -k` applies; the rest needs more installed
ALL_FILES = (*APPLIED, KUSTOMIZATION, ADAPTER_RULES, INFERENCE_SERVICE, DOCKERFILE)
TEMPLATE_DIR = "k8s"
FETCH_SCRIPT = Path(__file__).with_name("fetch_repository.py")  # the init container's program, copied verbatim

MANAGED_BY = "tritonize"
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")

_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # Service names (RFC 1035 label)
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # RFC 1123 label
# Kubernetes' resource.Quantity, as its OpenAPI schema spells it.
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class K8sOptions:
    """`tritonize k8s render` flags; None means "decided from the repository"."""

    repository: Path = Path("triton_repo")
    output: Path = Path("k8s")
    name: str | None = None  # Kubernetes object names (default: the model's name, or the repository's folder name
    # where it holds several models; made DNS-safe)
    namespace: str | None = None  # None: kubectl's current namespace
    source: str = IMAGE
    image: str | None = None  # a reference without a tag gets one (the repository digest, or the release)
    pvc: str | None = None  # CLAIM or CLAIM/PATH (source pvc)
    url: str | None = None  # a .tar.gz of the repository (source init)
    url_sha256: str | None = None
    min_replicas: int = DEFAULT_MIN_REPLICAS
    max_replicas: int = DEFAULT_MAX_REPLICAS
    target_queue_ms: float = DEFAULT_TARGET_QUEUE_MS
    gpus: int | None = None  # None: 1 for a GPU repository, 0 for a CPU one
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = DEFAULT_SHM_SIZE
    startup_timeout_s: int | None = None
    release: str = container.DEFAULT_TRITON_RELEASE
    service_type: str = "ClusterIP"
    api: bool = True  # the HTTP API as a second container (docs/api.md)
    trt_cache_pvc: str | None = None  # a claim for TensorRT's engine cache (None: an emptyDir, the pod's own)


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


# --------------------------------------------------------------------------- decisions


def dns_name(text: str) -> str:
    """A model name as a Kubernetes object name: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:63].rstrip("-")


def with_tag(reference: str, tag: str) -> str:
    """`reference` as given when it names a tag or digest, else with `tag`."""
    last = reference.rsplit("/", 1)[-1]
    return reference if (":" in last or "@" in reference) else f"{reference}:{tag}"


def repository_digest(repository: Path) -> str:
    """sha256 over every file's relative path and bytes: a changed repository is a new digest."""
    digest = hashlib.sha256()
    for path in sorted(p for p in Path(repository).rglob("*") if p.is_file()):
        digest.update(path.relative_to(repository).as_posix().encode() + b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def queue_rule() -> dict[str, Any]:
    """The prometheus-adapter rule for QUEUE_METRIC: per pod, the milliseconds a request spent queued,
    summed over the steps (tokenizer, model, post), per request that entered the first step.

    Triton counts queue time per model (`nv_inference_queue_duration_us`, a counter in µs); the ensemble
    itself is left out so nothing counts twice, and the first step's successes count the requests (an
    ensemble request enters it once). The step suffixes are the step roles' (spec/names.py).
    """
    steps = f'model=~".+({FIRST.suffix}|{MODEL.suffix}|{POST.suffix})"'
    first = f'model=~".+{FIRST.suffix}"'
    queued = f"sum(rate(nv_inference_queue_duration_us{{<<.LabelMatchers>>,{steps}}}[{RATE_WINDOW}])) by (<<.GroupBy>>)"
    requests = f"sum(rate(nv_inference_request_success{{<<.LabelMatchers>>,{first}}}[{RATE_WINDOW}])) by (<<.GroupBy>>)"
    return {
        "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^nv_inference_queue_duration_us$", "as": QUEUE_METRIC},
        # No traffic: 0 over a floor of 0.001 requests/s is 0 ms, not a division by zero.
        "metricsQuery": f"{queued} / 1000 / clamp_min({requests}, 0.001)",
    }


def _check(options: K8sOptions) -> None:
    """Flag values a cluster would refuse, or that make no sense together, as one clear error."""
    if options.min_replicas < 1:
        raise TritonizeError(f"--min-replicas must be at least 1 (got {options.min_replicas})")
    if options.max_replicas < options.min_replicas:
        raise TritonizeError(
            f"--max-replicas ({options.max_replicas}) is below --min-replicas ({options.min_replicas})"
        )
    if not options.target_queue_ms > 0:
        raise TritonizeError(f"--target-queue-ms must be above 0 (got {options.target_queue_ms:g})")
    if options.gpus is not None and options.gpus < 0:
        raise TritonizeError(f"--gpus must be 0 or more (got {options.gpus})")
    if options.startup_timeout_s is not None and options.startup_timeout_s < PROBE_PERIOD_S:
        raise TritonizeError(f"--startup-timeout must be at least {PROBE_PERIOD_S} s (got {options.startup_timeout_s})")
    for flag, value in (("--cpu", options.cpu), ("--memory", options.memory), ("--shm-size", options.shm_size)):
        if value is not None and not _QUANTITY.match(value):
            raise TritonizeError(f"{flag} {value!r} is not a Kubernetes quantity", hint="e.g. 2, 500m, 4Gi")
    if options.namespace is not None and not _NAMESPACE.match(options.namespace):
        raise TritonizeError(f"--namespace {options.namespace!r} is not a valid namespace (lower case, digits, '-')")
    if options.source not in SOURCES:
        raise TritonizeError(f"--source must be one of {', '.join(SOURCES)} (got {options.source!r})")
    if options.service_type not in SERVICE_TYPES:
        raise TritonizeError(f"--service-type must be one of {', '.join(SERVICE_TYPES)}")
    if options.image is not None and (not options.image or any(c.isspace() for c in options.image)):
        raise TritonizeError(f"--image {options.image!r} is not an image reference")
    wants = {PVC: ("--pvc", options.pvc), INIT: ("--url", options.url)}
    for source, (flag, value) in wants.items():
        if options.source == source and not value:
            raise TritonizeError(f"--source {source} needs {flag}")
        if options.source != source and value:
            raise TritonizeError(f"{flag} goes with --source {source} (got --source {options.source})")
    if options.url_sha256 is not None:
        if options.source != INIT:
            raise TritonizeError("--url-sha256 goes with --source init")
        if not _SHA256.match(options.url_sha256.lower()):
            raise TritonizeError("--url-sha256 must be 64 hexadecimal digits")
    if options.url and not options.url.startswith(("https://", "http://")):
        raise TritonizeError(f"--url must be an http(s) URL (got {options.url!r})")
    if options.pvc is not None:
        claim = options.pvc.split("/", 1)[0]
        if not _NAMESPACE.match(claim) or ".." in options.pvc.split("/"):
            raise TritonizeError(f"--pvc {options.pvc!r} is not CLAIM or CLAIM/PATH")
    if options.trt_cache_pvc is not None and not _NAMESPACE.match(options.trt_cache_pvc):
        raise TritonizeError(f"--trt-cache-pvc {options.trt_cache_pvc!r} is not a claim name")
    container.release_key(options.release)


def _app_name(options: K8sOptions, repository: Path, models: list[str]) -> str:
    """--name, else the only model's name, else the repository folder's: the objects serve every model."""
    default = models[0] if len(models) == 1 else Path(repository).resolve().name
    app = options.name if options.name is not None else dns_name(default)
    if not _DNS_LABEL.match(app):
        raise TritonizeError(
            f"{app!r} cannot name Kubernetes objects (lower case letters, digits and '-', starting with a letter)",
            hint="choose one with --name",
        )
    return app


def _server(
    image: str, models_dir: str, ports: dict[str, int], probe_port: int | str, startup_s: int,
    resources: dict[str, dict[str, str]], mounts: tuple[dict[str, Any], ...], volumes: tuple[dict[str, Any], ...],
    storage_uri: str | None = None,
) -> Server:
    """Probes: startup on Triton's ready endpoint (model load); readiness and liveness on a real inference.

    Triton keeps answering 200 on /v2/health/ready after a Python stub has died, so only an answer
    proves the pipeline. Readiness takes a broken pod out of the Service within 30 s; liveness restarts
    it after 2 minutes of failed answers (Triton does not restart a dead stub; /v2/health/live would
    leave the pod unready for ever). Both count a 503 (full queues) as healthy: under overload every
    replica is busy, and failing the check would only push its load onto the others.
    """
    health = container.health_command(ports["http"], models_dir, busy_ok=True)
    return Server(
        image=image,
        args=container.triton_command(ServerOptions(), models_dir=models_dir, ports=ports),
        models_dir=models_dir,
        ports=dict(ports),
        startup=Probe(PROBE_PERIOD_S, 5, math.ceil(startup_s / PROBE_PERIOD_S), http_path="/v2/health/ready", port=probe_port),
        readiness=Probe(PROBE_PERIOD_S, PROBE_TIMEOUT_S, 3, command=health),
        liveness=Probe(2 * PROBE_PERIOD_S, PROBE_TIMEOUT_S, 6, command=health),
        resources=resources,
        mounts=mounts,
        volumes=volumes,
        storage_uri=storage_uri,
    )


@dataclass(frozen=True)
class _Storage:
    """What the source adds to the pod, and what KServe fetches instead."""

    volumes: tuple[dict[str, Any], ...] = ()
    mounts: tuple[dict[str, Any], ...] = ()
    fetch: Fetch | None = None
    storage_uri: str | None = None


def _storage(options: K8sOptions) -> _Storage:
    """The image holds the repository itself; a claim or a fetched archive is mounted read-only at /models."""
    if options.source == PVC:
        claim, _, subpath = (options.pvc or "").partition("/")
        return _Storage(
            volumes=({"name": "models", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}},),
            mounts=({"name": "models", "mountPath": container.MODELS_DIR, "readOnly": True} | ({"subPath": subpath} if subpath else {}),),
            storage_uri=f"pvc://{options.pvc}",
        )
    if options.source == INIT:
        script = FETCH_SCRIPT.read_text()
        return _Storage(
            volumes=({"name": "models", "emptyDir": {}},),
            mounts=({"name": "models", "mountPath": container.MODELS_DIR, "readOnly": True},),
            fetch=Fetch(options.url or "", (options.url_sha256 or "").lower(), script),
            storage_uri=options.url,  # KServe's storage initializer unpacks .tar.gz archives itself
        )
    return _Storage()


def _tensorrt_cache(claim: str | None, release: str) -> tuple[tuple[dict[str, Any], ...], ...]:
    """The volume and mount of TensorRT's engine cache (spec.TENSORRT_CACHE, where the configs point it).

    By default an emptyDir: it outlives a container restart (a liveness kill, an OOM kill), which then loads
    the engine instead of building it, and goes with the pod, so it never holds an engine another image or
    GPU built, and no two pods write it. --trt-cache-pvc also carries engines to new pods (scale-out, a
    rollout, a drained node), at the price of what a shared cache brings: one folder per release (an engine
    is TensorRT's version's; onnxruntime names it by graph, precision and GPU compute capability), a claim
    the server's group may write (fsGroup), ReadWriteMany for several replicas, and a pod that starts while
    another writes an engine may read it half written and fail its load once (docs/operate.md).
    """
    if not claim:
        return ({"name": TRT_CACHE_VOLUME, "emptyDir": {}},), ({"name": TRT_CACHE_VOLUME, "mountPath": TENSORRT_CACHE},)
    return (
        ({"name": TRT_CACHE_VOLUME, "persistentVolumeClaim": {"claimName": claim}},),
        ({"name": TRT_CACHE_VOLUME, "mountPath": TENSORRT_CACHE, "subPath": f"triton-{release}"},),
    )


def _resources(options: K8sOptions, device: str, gpus: int) -> dict[str, dict[str, str]]:
    """Requests, and a memory limit equal to the request; no CPU limit: throttling a busy step only adds latency."""
    cpu, memory = DEFAULT_RESOURCES["gpu" if device == "gpu" else "cpu"]
    requests = {"cpu": options.cpu or cpu, "memory": options.memory or memory}
    limits = {"memory": requests["memory"]}
    if gpus:
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(gpus)
    return {"requests": requests, "limits": limits}


def _gpus(options: K8sOptions, device: str, repository: Path) -> int:
    """1 for a GPU repository and 0 for a CPU one, unless asked; a GPU step without a GPU cannot load."""
    gpus = (1 if device == "gpu" else 0) if options.gpus is None else options.gpus
    if device == "gpu" and gpus == 0:
        raise TritonizeError(f"{repository} was generated for GPU: its model step needs --gpus 1 or more")
    if device != "gpu" and gpus > 0:
        raise TritonizeError(
            f"{repository} was generated for CPU: a GPU would sit idle", hint="regenerate with --device gpu"
        )
    return gpus


def _api(storage: _Storage, model_image: str | None) -> Api:
    """The API container: ready when its /health answers (a real inference through Triton, the one route
    that needs no key); the repository from the pod's volume, or copied out of the model image."""
    from .. import __version__

    copied = model_image is not None and not storage.mounts
    mounts = ({"name": "api-models", "mountPath": API_MODELS_DIR, "readOnly": True},) if copied else tuple(
        m | {"readOnly": True} for m in storage.mounts)
    return Api(
        image=f"{API_IMAGE}:{__version__}",
        args=("tritonize", "api", "--repository", API_MODELS_DIR, "--grpc-url",
              f"127.0.0.1:{container.CONTAINER_PORTS['grpc']}", "--host", "0.0.0.0", "--port", str(API_PORT)),
        port=API_PORT,
        readiness=Probe(PROBE_PERIOD_S, PROBE_TIMEOUT_S, 3, http_path="/health", port="api"),
        resources=API_RESOURCES,
        mounts=mounts,
        volumes=({"name": "api-models", "emptyDir": {}},) if copied else (),
        copy_from=model_image if copied else None,
    )


def k8s_spec(options: K8sOptions) -> K8sSpec:
    """Read the repository's manifest and decide everything the manifests say."""
    _check(options)
    repository = Path(options.repository)
    require_repository(repository)
    manifests = read_manifests(repository)
    if not (repository / HEALTH_FILE).is_file():
        raise TritonizeError(f"{repository} has no {HEALTH_FILE}", hint="regenerate it with this tritonize")
    # One pod serves every model: a GPU when any model step runs on one, TensorRT's startup and cache when any builds.
    device = "gpu" if any(m.options.device == "gpu" for m in manifests) else "cpu"
    tensorrt = any(m.options.tensorrt for m in manifests)
    gpus = _gpus(options, device, repository)
    models = [m.name for m in manifests]
    app = _app_name(options, repository, models)
    digest = repository_digest(repository)
    serving_image = container.default_image(options.release)
    model_image = None
    if options.source == IMAGE:  # --image names the image to build; its tag, by default, is the content's
        model_image = with_tag(options.image or f"tritonize-{app}", digest[:12])
    elif options.image:
        serving_image = with_tag(options.image, f"{options.release}-py3")

    if options.trt_cache_pvc and not tensorrt:
        raise TritonizeError(f"--trt-cache-pvc: no model of {repository} runs TensorRT, so there is no engine to cache",
                             hint="regenerate with --device gpu --tensorrt, or leave the flag out")
    resources = _resources(options, device, gpus)
    shm = ({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}},)
    shm_mount = ({"name": "dshm", "mountPath": "/dev/shm"},)
    cache, cache_mount = _tensorrt_cache(options.trt_cache_pvc, options.release) if tensorrt else ((), ())
    storage = _storage(options)
    startup_s = options.startup_timeout_s or (STARTUP_TENSORRT_S if tensorrt else container.STARTUP_S)
    server = _server(
        model_image or serving_image, container.MODELS_DIR, container.CONTAINER_PORTS, "http", startup_s, resources,
        shm_mount + cache_mount + storage.mounts, shm + cache + storage.volumes,
    )
    # KServe mounts what storageUri names itself, and names the container's ports: its probes use numbers.
    # Its engine cache stays the pod's emptyDir (--trt-cache-pvc is the Deployment's: docs/operate.md).
    kserve_cache, kserve_cache_mount = _tensorrt_cache(None, options.release) if tensorrt else ((), ())
    kserve = _server(
        model_image or serving_image, KSERVE_MODELS_DIR if storage.storage_uri else container.MODELS_DIR, KSERVE_PORTS,
        KSERVE_PORTS["http"], startup_s, resources, shm_mount + kserve_cache_mount, shm + kserve_cache,
        storage.storage_uri,
    )
    labels = {"app.kubernetes.io/name": "tritonize", "app.kubernetes.io/instance": app,
              "app.kubernetes.io/managed-by": MANAGED_BY}
    return K8sSpec(
        app=app,
        namespace=options.namespace,
        models=tuple(models),
        device=device,
        source=options.source,
        repository=repository,
        digest=digest,
        serving_image=serving_image,
        model_image=model_image,
        labels=labels,
        selector={k: labels[k] for k in ("app.kubernetes.io/name", "app.kubernetes.io/instance")},
        min_replicas=options.min_replicas,
        max_replicas=options.max_replicas,
        target_queue_ms=options.target_queue_ms,
        gpus=gpus,
        service_type=options.service_type,
        server=server,
        kserve=kserve,
        fetch=storage.fetch,
        queue_rule=queue_rule(),
        api=_api(storage, model_image) if options.api else None,
        # GPU node pools are commonly tainted nvidia.com/gpu:NoSchedule; tolerating it is harmless elsewhere.
        tolerations=({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},) if gpus else (),
        # The restricted Pod Security Standard: non-root (the image's own uid), no privilege escalation,
        # no capabilities, the runtime's default seccomp profile.
        pod_security={"runAsNonRoot": True, "runAsUser": container.IMAGE_UID, "runAsGroup": container.IMAGE_UID,
                      "seccompProfile": {"type": "RuntimeDefault"}},
        security=dict(CONTAINER_SECURITY),
        volume_group=container.IMAGE_UID if options.trt_cache_pvc else None,
    )


# --------------------------------------------------------------------------- rendering


def _to_yaml(value: Any) -> str:
    import yaml

    def plain(v: Any) -> Any:  # tuples and dataclass-held dicts as plain YAML
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v

    return yaml.safe_dump(plain(value), sort_keys=False, width=1000).rstrip("\n")


def _template(name: str) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = _to_yaml
    env.filters["quote"] = json.dumps  # a JSON string is a YAML double-quoted scalar
    return env.get_template(f"{TEMPLATE_DIR}/{name}")


def render(spec: K8sSpec, output: Path = Path("k8s")) -> dict[str, str]:
    """File name -> text, for every file of this spec (the Dockerfile only where the image holds the repository);
    `output` is where they will be written (the build command in the Dockerfile names it)."""
    files = {name: f"{name}.j2" for name in (*APPLIED, KUSTOMIZATION, ADAPTER_RULES, INFERENCE_SERVICE)}
    if spec.source == IMAGE:
        files[DOCKERFILE] = f"{DOCKERFILE}.j2"
    context = {
        "spec": spec,
        "applied": APPLIED,
        "queue_metric": QUEUE_METRIC,
        "dockerfile": DOCKERFILE,
        "dockerfile_path": (Path(output) / DOCKERFILE).as_posix(),
        "label_prefix": container.LABEL_PREFIX,
        "kserve_models_dir": KSERVE_MODELS_DIR,
        "adapter_rules": ADAPTER_RULES,
        "inference_service": INFERENCE_SERVICE,
    }
    return {name: _template(template).render(**context) for name, template in files.items()}


def write(spec: K8sSpec, output: Path) -> list[Path]:
    """Write the files; remove those an earlier render wrote that this one does not (a stale Dockerfile)."""
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise TritonizeError(f"--output {output} exists and is not a folder")
    output.mkdir(parents=True, exist_ok=True)
    rendered = render(spec, output)
    for stale in set(ALL_FILES) - set(rendered):
        (output / stale).unlink(missing_ok=True)
    paths = []
    for name, text in rendered.items():
        (output / name).write_text(text)
        paths.append(output / name)
    return paths


def next_steps(spec: K8sSpec, output: Path) -> list[str]:
    """The commands that take the rendered folder to a serving cluster."""
    steps = [f"docker build -t {spec.serving_image} docker/   # the serving image, once per release"]
    if spec.model_image:
        steps.append(f"docker build -t {spec.model_image} -f {output / DOCKERFILE} {spec.repository}")
    pushed = spec.model_image or spec.serving_image
    if "/" in pushed.split(":")[0]:
        steps.append(f"docker push {pushed}")
    else:  # a local name: no registry to push to
        steps.append(f"kind load docker-image {pushed}   # or minikube image load; for a registry: --image REGISTRY/NAME")
    ns = f" -n {spec.namespace}" if spec.namespace else ""
    steps += [
        f"kubectl apply -k {output}",
        f"kubectl rollout status deployment/{spec.app}{ns}",
    ]
    return steps


# --------------------------------------------------------------------------- CLI


def register(sub: argparse._SubParsersAction) -> None:
    k8s = sub.add_parser("k8s", help="Kubernetes manifests for a repository (Deployment, HPA, KServe, ...)")
    actions = k8s.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = actions.add_parser("render", help="write the manifests into a folder")
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    d = K8sOptions()
    p.add_argument("--repository", "-r", type=Path, default=d.repository, help="model repository (default: %(default)s)")
    p.add_argument("--output", "-o", type=Path, default=d.output, help="folder to write (default: %(default)s)")
    p.add_argument("--name", default=None, help="object names (default: the model's name; for a repository of "
                   "several models, its folder's name)")
    p.add_argument("--namespace", "-n", default=None, help="(default: kubectl's current namespace)")
    src = p.add_argument_group("where the repository comes from")
    src.add_argument("--source", choices=tuple(SOURCES), default=d.source,
                     help="; ".join(f"{k}: {v}" for k, v in SOURCES.items()))
    src.add_argument("--image", default=None,
                     help="image to run; without a tag it gets one. Source image: the image to build "
                     "(default tritonize-<name>:<repository digest>); otherwise the serving image "
                     f"(default {container.IMAGE_REPOSITORY}:<release>-py3)")
    src.add_argument("--pvc", default=None, metavar="CLAIM[/PATH]", help="source pvc: the claim (and folder) holding it")
    src.add_argument("--url", default=None, help="source init: an http(s) URL of a .tar.gz of the repository")
    src.add_argument("--url-sha256", default=None, help="source init: the archive's sha256, checked before unpacking")
    src.add_argument("--release", default=d.release, help="Triton release of the serving image (default: %(default)s)")
    scale = p.add_argument_group("scaling and resources")
    scale.add_argument("--min-replicas", type=int, default=d.min_replicas, help="(default: %(default)s)")
    scale.add_argument("--max-replicas", type=int, default=d.max_replicas, help="(default: %(default)s)")
    scale.add_argument("--target-queue-ms", type=float, default=d.target_queue_ms,
                       help="scale out above this queue time per request, averaged over pods (default: %(default)s)")
    scale.add_argument("--gpus", type=int, default=None, help="GPUs per pod (default: 1 for a GPU repository, 0 for CPU)")
    scale.add_argument("--cpu", default=None, help="CPU request (default: 2)")
    scale.add_argument("--memory", default=None, help="memory request and limit (default: 4Gi, 8Gi with a GPU)")
    scale.add_argument("--shm-size", default=d.shm_size, help="/dev/shm for the Python backend (default: %(default)s)")
    scale.add_argument("--startup-timeout", dest="startup_timeout_s", type=int, default=None,
                       help=f"seconds allowed for the model load (default: {container.STARTUP_S}, {STARTUP_TENSORRT_S} with TensorRT)")
    p.add_argument("--service-type", choices=SERVICE_TYPES, default=d.service_type, help="(default: %(default)s)")
    p.add_argument("--trt-cache-pvc", default=None, metavar="CLAIM",
                   help="TensorRT repositories: keep the engine cache on this claim (a folder per release), so new "
                   "pods load engines instead of building them (default: an emptyDir, kept across container restarts)")
    p.add_argument("--no-api", dest="api", action="store_false",
                   help=f"leave out the HTTP API container (port {API_PORT}: OpenAI, Cohere/Jina, TEI routes)")


def options_from_args(args: argparse.Namespace) -> K8sOptions:
    fields = K8sOptions.__dataclass_fields__
    return K8sOptions(**{k: v for k, v in vars(args).items() if k in fields})


def run(args: argparse.Namespace) -> int:
    options = options_from_args(args)
    spec = k8s_spec(options)
    paths = write(spec, options.output)
    err.print(f"[green]✓[/] {len(paths)} files in {options.output} for {', '.join(spec.models)} "
              f"({spec.device}, repository from {spec.source}, image {spec.image})")
    for path in paths:
        out.print(f"  {path}", markup=False, highlight=False)
    out.print("Next:")
    for line in next_steps(spec, options.output):
        out.print(f"  {line}", markup=False, highlight=False, soft_wrap=True)
    return 0
