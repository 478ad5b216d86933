"""`deploy.py docker up|down|status|logs`: the serving container (container.py), through the docker SDK
(`switch`, `canary` and `shadow` are refused in one line: a container is rolled over, not reloaded; base.py).

The container is described as data first (`container_spec.py`), so what `up` launches can be read and tested
without an engine. `DockerRuntime` (`runtime.py`) only connects (`engine.py`), builds or pulls the image, runs that
spec and waits for readiness; `cli.py` holds the flags, `__main__.py` renders docker/Dockerfile and
docker-compose.yml.

The container serves the repository's `config.pbtxt` files (native onnxruntime / TensorRT backends), the
production variant, unless `--variant fused` selects the fused step (`configs/fused.pbtxt`); `--config-name NAME`,
the deprecated spelling, still selects `configs/NAME.pbtxt`.

The container's settings (ports, shm size, ulimits, healthcheck, watchdog, stop grace, restart policy) are
container.py's, from which docker-compose.yml is rendered too, so what `deploy.py docker` proves holds for `docker
compose up` (which tests/container/test_docker_compose.py also runs). The `docker` SDK is imported lazily so that
building the CLI stays fast.
"""

from .cli import add_arguments, from_args, parse_ulimit, with_ulimits
from .container_spec import (
    CONTAINER_NAME,
    ContainerSpec,
    DockerOptions,
    GpuRequest,
    bind_address,
    container_spec,
    parse_gpus,
    reach_address,
)
from .engine import _follow, _Progress, connect, no_engine_error
from .runtime import DockerRuntime

__all__ = [
    "CONTAINER_NAME", "ContainerSpec", "DockerOptions", "DockerRuntime", "GpuRequest", "_Progress", "_follow",
    "add_arguments", "bind_address", "connect", "container_spec", "from_args", "no_engine_error", "parse_gpus",
    "parse_ulimit", "reach_address", "with_ulimits",
]
