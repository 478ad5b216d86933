"""`k8s_spec`: reads the repository's manifests and the options, and decides everything the manifests say."""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TritonizeError
from ..manifest import read_manifests
from ..runtime import container
from ..runtime.base import ServerOptions, require_repository
from ..serving.health import HEALTH_FILE
from ..spec import FIRST, MODEL, POST, TENSORRT_CACHE
from .options import (
    API_IMAGE,
    API_MODELS_DIR,
    API_PORT,
    API_RESOURCES,
    CONTAINER_SECURITY,
    DEFAULT_RESOURCES,
    GPU_RESOURCE,
    IMAGE,
    INIT,
    KSERVE_MODELS_DIR,
    KSERVE_PORTS,
    MANAGED_BY,
    PROBE_PERIOD_S,
    PROBE_TIMEOUT_S,
    PVC,
    QUEUE_METRIC,
    RATE_WINDOW,
    STARTUP_TENSORRT_S,
    TRT_CACHE_VOLUME,
    K8sOptions,
    check,
)
from .spec import Api, Fetch, K8sSpec, Probe, Server

FETCH_SCRIPT = Path(__file__).with_name("fetch_repository.py")  # the init container's program, copied verbatim
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")  # Service names (RFC 1035 label)


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
    storage_uri: str | None = None, http_address: str | None = container.LOOPBACK,
) -> Server:
    """Probes: startup on Triton's ready endpoint (model load); readiness and liveness on a real inference.

    Triton's own HTTP port binds the pod's loopback (`http_address`): the health script and the startup check
    reach it from inside the container, and clients reach its routes through the API's front, which bounds every
    body (docs/reliability.md). KServe's variant routes its own ingress to that port, so it binds every interface.

    Triton keeps answering 200 on /v2/health/ready after a Python stub has died, so only an answer
    proves the pipeline. Readiness takes a broken pod out of the Service within 30 s; liveness restarts
    it after 2 minutes of failed answers (Triton does not restart a dead stub; /v2/health/live would
    leave the pod unready for ever). Both count a 503 (full queues) as healthy: under overload every
    replica is busy, and failing the check would only push its load onto the others.
    """
    health = container.health_command(ports["http"], models_dir, busy_ok=True)
    periods = math.ceil(startup_s / PROBE_PERIOD_S)
    startup = (Probe(PROBE_PERIOD_S, 5, periods, command=container.ready_command(ports["http"])) if http_address
               else Probe(PROBE_PERIOD_S, 5, periods, http_path="/v2/health/ready", port=probe_port))
    return Server(
        image=image,
        args=container.triton_command(ServerOptions(), models_dir=models_dir, ports=ports, http_address=http_address),
        models_dir=models_dir,
        ports=dict(ports),
        exposed={k: v for k, v in ports.items() if k != "http" or not http_address},
        startup=startup,
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
              f"127.0.0.1:{container.CONTAINER_PORTS['grpc']}", "--http-url",
              f"127.0.0.1:{container.CONTAINER_PORTS['http']}", "--host", "0.0.0.0", "--port", str(API_PORT),
              "--workers", "1"),  # one process a pod, on its CPU request: replicas add more
        port=API_PORT,
        readiness=Probe(PROBE_PERIOD_S, PROBE_TIMEOUT_S, 3, http_path="/health", port="api"),
        resources=API_RESOURCES,
        mounts=mounts,
        volumes=({"name": "api-models", "emptyDir": {}},) if copied else (),
        copy_from=model_image if copied else None,
    )


def k8s_spec(options: K8sOptions) -> K8sSpec:
    """Read the repository's manifest and decide everything the manifests say."""
    check(options)
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
        storage.storage_uri, http_address=None,
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
