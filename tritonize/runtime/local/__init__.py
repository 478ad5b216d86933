"""`deploy.py local up|down|status|logs|switch|canary|shadow`: the tritonserver binary from the nvidia-pytriton wheel.

No Docker and no GPU. The wheel ships Triton 2.51 with its Python backend alone; the server serves either
variant of a repository (`--variant`): the production configs (each step's config.pbtxt, as NVIDIA's container
loads them), with Triton's native onnxruntime backend built from its release sources (native_backend.py) laid
out beside the Python backend, or the fused step (`--model-config-name=fused`, which selects each model's
`configs/fused.pbtxt`: the tokenizer and onnxruntime in one Python-backend model). The server runs in its own
process group, so `down` stops it together with its Python-backend stub processes. `switch` serves the version the
repository now names, and `canary` and `shadow` serve a new version beside the served one (versions.py,
candidate.py); all three need `--model-control explicit`.

Each server gets an instance directory `<run_dir>/local-<http_port>/` holding its state (pid, endpoints,
repository), its log and its backend directory, so several servers can run side by side on different ports.

`up` also starts a supervisor beside the server (supervisor.py): Triton 2.51 neither notices nor recovers a dead
Python stub, so the supervisor reloads the step whose stub died (explicit model control) or restarts the server (a
dead stub without model control, a dead server, a health check, a tiny inference through the ensemble, that keeps
failing). The two share the instance directory's files and the process-group helpers (instance.py) and never
import each other. `up --monitoring` also starts a Prometheus that scrapes the server (monitoring.py), with its
state under the same instance directory; `down` stops it with the server and `status` reports it.

One job a module: `wheel.py` finds the server in the wheel, `server.py` runs its process, `companions.py` starts
and stops the API, the supervisor and Prometheus beside it, `status.py` reports, `runtime.py` is `LocalRuntime`
(the stack in order), `cli.py` the flags.
"""

from .runtime import DEFAULT_STOP_TIMEOUT_S, LocalRuntime
from .wheel import (
    WHEEL_LIBS_DIR,
    WHEEL_SERVER_DIR,
    WHEEL_STUBS_DIR,
    TritonInstall,
    check_install,
    find_install,
    server_library,
)

__all__ = [
    "DEFAULT_STOP_TIMEOUT_S", "WHEEL_LIBS_DIR", "WHEEL_SERVER_DIR", "WHEEL_STUBS_DIR", "LocalRuntime", "TritonInstall",
    "check_install", "find_install", "server_library",
]
