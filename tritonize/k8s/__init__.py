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

The package, one job a module: `options.py` (the flags as `K8sOptions`, their defaults and checks), `spec.py`
(`K8sSpec`, the decisions as data), `decisions.py` (`k8s_spec`), `rendering.py` (templates/k8s/ into files),
`cli.py` (`tritonize k8s render`); `fetch_repository.py` is the init container's program. The names below are
what callers and tests use.
"""

from .decisions import FETCH_SCRIPT, dns_name, k8s_spec, queue_rule, repository_digest, with_tag
from .options import (
    API_IMAGE,
    API_MODELS_DIR,
    API_PORT,
    GPU_RESOURCE,
    IMAGE,
    INIT,
    KSERVE_MODELS_DIR,
    KSERVE_PORTS,
    PVC,
    QUEUE_METRIC,
    SOURCES,
    STARTUP_TENSORRT_S,
    K8sOptions,
)
from .rendering import (
    ADAPTER_RULES,
    ALL_FILES,
    APPLIED,
    DEPLOYMENT,
    DOCKERFILE,
    HPA,
    INFERENCE_SERVICE,
    KUSTOMIZATION,
    PDB,
    SERVICE,
    next_steps,
    render,
    write,
)
from .spec import K8sSpec

__all__ = [
    "ADAPTER_RULES", "ALL_FILES", "API_IMAGE", "API_MODELS_DIR", "API_PORT", "APPLIED", "DEPLOYMENT", "DOCKERFILE",
    "FETCH_SCRIPT", "GPU_RESOURCE", "HPA", "IMAGE", "INFERENCE_SERVICE", "INIT", "KSERVE_MODELS_DIR", "KSERVE_PORTS",
    "KUSTOMIZATION", "PDB", "PVC", "QUEUE_METRIC", "SERVICE", "SOURCES", "STARTUP_TENSORRT_S", "K8sOptions", "K8sSpec",
    "dns_name", "k8s_spec", "next_steps", "queue_rule", "render", "repository_digest", "with_tag", "write",
]
