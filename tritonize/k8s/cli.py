"""`tritonize k8s render`: its flags, and the files and next steps it prints."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..flags import options_from
from ..console import err, out
from ..runtime import container
from .decisions import k8s_spec
from .options import API_PORT, SOURCES, SERVICE_TYPES, STARTUP_TENSORRT_S, K8sOptions
from .rendering import next_steps, write

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
    return options_from(K8sOptions, args)


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
