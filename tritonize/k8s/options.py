"""`tritonize k8s render`'s options (`K8sOptions`), the defaults and bounds behind them, and the check that refuses
what a cluster would refuse, in one line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import TritonizeError
from ..runtime import container

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

MANAGED_BY = "tritonize"
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")

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



def check(options: K8sOptions) -> None:
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
