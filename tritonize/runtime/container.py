"""The serving container: NVIDIA's Triton image plus what the repository needs, and how it runs.

One place for what `deploy.py docker`, docker-compose.yml and the Kubernetes manifests share: the Triton
release and the image built on it, the ports and folders inside the container, Triton's command line, the
health check and the watchdog, the stop timeouts, and the rendering of docker/Dockerfile and
docker-compose.yml (templates/docker/). The docker runtime applies these settings through the SDK and
compose is rendered from them, so what `deploy.py docker` proves holds for `docker compose up`; k8s.py
runs the same image and command in a pod. Compose alone mounts a named volume over TensorRT's engine cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from ..errors import TritonizeError
from ..lockfile import SERVING_IMAGE_LOCK, Pin, read_lock
from ..paths import TEMPLATES_DIR
from ..serving import SERVING_DIR
from ..serving.health import HEALTH_FILE
from ..spec import TENSORRT_CACHE
from . import machine
from .base import METRICS_CONFIG, ServerOptions

# --------------------------------------------------------------------------- release and image

# The one Triton release setting. docker-compose.yml's `${TRITON_RELEASE:-...}`
# default and the rendered docker/Dockerfile must agree (tests check both).
# The floor is 25.08: the August 2025 fixes (CVE-2025-23310/23311/23317/23319/
# 23320/23334) shipped in 25.07, and the project also requires the later
# Python-backend fix (CVE-2025-23316). 25.10 is a later, widely used release.
# The local server (pip wheel, 2.51 = 24.10) has none of these fixes.
DEFAULT_TRITON_RELEASE = "25.10"
MIN_TRITON_RELEASE = "25.08"
BASE_REPOSITORY = "nvcr.io/nvidia/tritonserver"
IMAGE_REPOSITORY = "tritonize-tritonserver"
IMAGE_UID = 1000  # triton-server in NVIDIA's images: the serving image's USER, the owner of its writable folders
LABEL_PREFIX = "ai.tritonize"  # image labels, container labels, pod annotations
BASE_LABEL = "org.opencontainers.image.base.name"  # the image an image was built on: another base, a rebuild
# compose's variable that replaces NVIDIA's image as the serving image's BASE_IMAGE (a registry mirror; the
# container tests' stand-in); unset, the Dockerfile's default, NVIDIA's image of TRITON_RELEASE.
BASE_IMAGE_VARIABLE = "TRITON_BASE_IMAGE"
API_BASE_IMAGE = "python:3.11-slim-bookworm"  # docker/api.Dockerfile's PYTHON_IMAGE default; API_BASE_IMAGE replaces it

_RELEASE_RE = re.compile(r"^(\d{2})\.(\d{2})$")


def release_key(release: str) -> tuple[int, int]:
    match = _RELEASE_RE.match(release)
    if not match:
        raise TritonizeError(f"not a Triton release: {release!r}", hint="use YY.MM, e.g. " + DEFAULT_TRITON_RELEASE)
    return int(match.group(1)), int(match.group(2))


def release_is_patched(release: str) -> bool:
    """Whether a release has the fixes for the 2025 Python-backend and HTTP-server CVEs."""
    return release_key(release) >= release_key(MIN_TRITON_RELEASE)


def base_image(release: str = DEFAULT_TRITON_RELEASE) -> str:
    return f"{BASE_REPOSITORY}:{release}-py3"


def default_image(release: str = DEFAULT_TRITON_RELEASE) -> str:
    return f"{IMAGE_REPOSITORY}:{release}-py3"


def image_pins() -> tuple[Pin, ...]:
    """What the serving image adds to NVIDIA's (tokenizers and Pillow, the versions the generator uses), from its
    lock: wheels for the image's Python, every file's hash (`make lock` refreshes it)."""
    return tuple(read_lock(SERVING_IMAGE_LOCK).values())


def pins_label(pins: tuple[Pin, ...]) -> str:
    """The image's label value: an image whose label differs was built from another lock and is rebuilt."""
    return " ".join(pin.requirement for pin in pins)


# --------------------------------------------------------------------------- inside the container

MODELS_DIR = "/models"
LOOPBACK = "127.0.0.1"
ANY_ADDRESS = "0.0.0.0"  # every interface of the container or pod
CONTAINER_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}
SCRIPTS_DIR = "/opt/tritonize"  # the image's copies of tritonize/serving/{health,procfs,watchdog}.py
HEALTH_SCRIPT = f"{SCRIPTS_DIR}/health.py"
WATCHDOG_SCRIPT = f"{SCRIPTS_DIR}/watchdog.py"
IMAGE_SCRIPTS = ("health.py", "procfs.py", "watchdog.py")  # from tritonize/serving/, byte for byte
# TensorRT's engine cache (the configs' trt_engine_cache_path): the image creates the folder for IMAGE_UID, and
# compose mounts a named volume over it, which takes that owner on first use and outlives the containers, so
# that `docker compose down` / `up` and restarts reuse the engines instead of building them again.
TRT_CACHE_DIR = TENSORRT_CACHE
TRT_CACHE_VOLUME = "trt-engine-cache"
# Python-backend instances exchange tensors through /dev/shm; Docker's 64 MB
# default is too small once several tokenizer instances grow their regions.
DEFAULT_SHM_SIZE = "1g"
# NVIDIA's recommended limits for its framework containers.
ULIMITS = (("memlock", -1, -1), ("stack", 67108864, 67108864))
SECURITY_OPT = ("no-new-privileges:true",)
ENVIRONMENT = {"PYTHONDONTWRITEBYTECODE": "1"}  # the repository is mounted read-only
RESTART_POLICY = "unless-stopped"  # what brings the container back when the watchdog ends it


def health_digest() -> str:
    """The image's label for its scripts (health check, watchdog): an image whose scripts differ (one that reads
    a single check, say, where the repository now holds several) is rebuilt."""
    digest = hashlib.sha256()
    for name in IMAGE_SCRIPTS:
        digest.update((SERVING_DIR / name).read_bytes())
    return digest.hexdigest()


# --------------------------------------------------------------------------- timeouts and checks

EXIT_TIMEOUT_S = 30  # Triton drains in-flight requests this long after SIGTERM
STOP_GRACE_S = EXIT_TIMEOUT_S + 10  # SIGTERM to SIGKILL: the drain, and the server's own exit
STARTUP_S = 300  # the first model load, before a failed check counts; it may build TensorRT engines
HEALTH_TIMEOUT_S = 8  # the health script's own; each runner's timeout is a little longer


def health_command(
    http_port: int = CONTAINER_PORTS["http"], models_dir: str = MODELS_DIR, busy_ok: bool = False
) -> tuple[str, ...]:
    """The health check's command: a tiny inference through the ensemble (the repository's health.json), not
    /v2/health/ready, which keeps answering 200 after a Python stub has died. busy_ok counts a full queue
    (503) as healthy, for probes of replicas that share the load."""
    return ("python3", HEALTH_SCRIPT, "--url", f"http://127.0.0.1:{http_port}",
            "--file", f"{models_dir}/{HEALTH_FILE}", "--timeout", str(HEALTH_TIMEOUT_S),
            *(("--busy-ok",) if busy_ok else ()))


def ready_command(http_port: int = CONTAINER_PORTS["http"]) -> tuple[str, ...]:
    """Triton's ready endpoint asked from inside the container, where its HTTP port binds loopback (a kubelet's
    HTTP check comes from outside)."""
    url = f"http://127.0.0.1:{http_port}/v2/health/ready"
    return ("python3", "-c", f"import sys, urllib.request; sys.exit(urllib.request.urlopen({url!r}, timeout=4).status != 200)")


HEALTHCHECK = {
    "test": health_command(),
    "interval": "10s",
    "timeout": "10s",
    "start_period": f"{STARTUP_S}s",
    "retries": 3,
}
# The image's entrypoint (tritonize/serving/watchdog.py) runs the same check more often and ends the
# container after `retries` failures in a row: the healthcheck only reports `unhealthy`, and Docker restarts
# a container only when its process exits.
WATCHDOG = {"interval": 5, "retries": 3, "timeout": HEALTH_TIMEOUT_S, "start_period": STARTUP_S}


def duration_s(text: str) -> int:
    """A compose duration of whole seconds ("10s") as seconds."""
    if not re.fullmatch(r"\d+s", text):
        raise ValueError(f"not a duration in seconds: {text!r}")
    return int(text[:-1])


# --------------------------------------------------------------------------- command line


def entrypoint() -> tuple[str, ...]:
    """The image's ENTRYPOINT: the watchdog, with Triton's command (CMD, or the runtime's) after `--`."""
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in WATCHDOG.items()]
    return ("python3", WATCHDOG_SCRIPT, f"--file={MODELS_DIR}/{HEALTH_FILE}", *flags, "--")


def triton_command(
    options: ServerOptions,
    models_dir: str = MODELS_DIR,
    ports: dict[str, int] | None = None,
    config_name: str | None = None,
    address: str | None = None,
    http_address: str | None = LOOPBACK,
) -> tuple[str, ...]:
    """The tritonserver command line inside the container (ports are the container's own; KServe's differ).

    config_name selects each model's configs/<name>.pbtxt; address binds the gRPC and metrics endpoints (host
    networking, where the container publishes nothing and Triton's own sockets are the host's). Triton's own HTTP
    port binds `http_address`: the container's loopback by default, where the health check reaches it and nothing
    outside does (clients reach its routes through the API's front, which bounds every body: docs/reliability.md);
    None binds every interface, for a port published on the host's loopback only (`deploy.py docker`)."""
    ports = ports or CONTAINER_PORTS
    command = [
        "tritonserver",
        f"--model-repository={models_dir}",
        f"--model-control-mode={options.model_control}",
    ]
    if config_name:
        command.append(f"--model-config-name={config_name}")
    if options.model_control == "explicit":
        command.append("--load-model=*")  # explicit mode loads nothing unless asked
    command += [
        "--strict-readiness=true",
        f"--exit-timeout-secs={EXIT_TIMEOUT_S}",
        f"--http-port={ports['http']}",
        f"--grpc-port={ports['grpc']}",
        f"--metrics-port={ports['metrics']}",
        *(f"--metrics-config={setting}" for setting in METRICS_CONFIG),
    ]
    if address:
        http_address = machine.loopback(address)
        command += [f"--{kind}-address={address}" for kind in ("grpc", "metrics")]
    if http_address:
        command.append(f"--http-address={http_address}")
        if not address:  # Triton's metrics bind the HTTP address unless told: they stay reachable for Prometheus
            command.append(f"--metrics-address={ANY_ADDRESS}")
    return (*command, f"--log-verbose={options.log_verbose}")


# --------------------------------------------------------------------------- rendering

DOCKERFILE_TEMPLATE = TEMPLATES_DIR / "docker" / "Dockerfile.j2"
COMPOSE_TEMPLATE = TEMPLATES_DIR / "docker" / "docker-compose.yml.j2"


def _render(path: Path, **values: Any) -> str:
    """A template of templates/docker/, every value it names required."""
    import jinja2

    if not path.is_file():
        raise TritonizeError(f"missing template {path}", hint="reinstall tritonize")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(path.read_text()).render(**values)


def render_dockerfile(release: str = DEFAULT_TRITON_RELEASE) -> str:
    """docker/Dockerfile, the serving image."""
    release_key(release)
    pins = image_pins()
    return _render(
        DOCKERFILE_TEMPLATE,
        release=release,
        min_release=MIN_TRITON_RELEASE,
        base_repository=BASE_REPOSITORY,
        image_repository=IMAGE_REPOSITORY,
        image_uid=IMAGE_UID,
        pins=pins,
        pins_label=pins_label(pins),
        label_prefix=LABEL_PREFIX,
        base_label=BASE_LABEL,
        ports=[str(p) for p in CONTAINER_PORTS.values()],
        healthcheck=HEALTHCHECK,
        scripts_dir=SCRIPTS_DIR,
        scripts=[(f"{SCRIPTS_DIR}/{name}", base64.b64encode((SERVING_DIR / name).read_bytes()).decode("ascii"))
                 for name in IMAGE_SCRIPTS],
        health_script=HEALTH_SCRIPT,
        watchdog_script=WATCHDOG_SCRIPT,
        health_digest=health_digest(),
        trt_cache_dir=TRT_CACHE_DIR,
        entrypoint_json=json.dumps(list(entrypoint())),
        command_json=json.dumps(list(triton_command(ServerOptions()))),
    )


def render_compose() -> str:
    """docker-compose.yml: the serving image's container with the settings `deploy.py docker` applies."""
    return _render(
        COMPOSE_TEMPLATE,
        release=DEFAULT_TRITON_RELEASE,
        base_repository=BASE_REPOSITORY,
        base_image_variable=BASE_IMAGE_VARIABLE,
        image_repository=IMAGE_REPOSITORY,
        trt_cache_dir=TRT_CACHE_DIR,
        trt_cache_volume=TRT_CACHE_VOLUME,
        api_base_image=API_BASE_IMAGE,
        command=triton_command(ServerOptions(log_verbose=0))[:-1],  # --log-verbose comes from the environment
        models_dir=MODELS_DIR,
        ports={k: v for k, v in CONTAINER_PORTS.items() if k != "http"},  # Triton's own HTTP: never published
        environment=ENVIRONMENT,
        shm_size=DEFAULT_SHM_SIZE,
        ulimits=ULIMITS,
        security_opt=SECURITY_OPT,
        healthcheck_json=json.dumps(["CMD", *HEALTHCHECK["test"]]),
        healthcheck=HEALTHCHECK,
        restart=RESTART_POLICY,
        stop_grace_s=STOP_GRACE_S,
    )
