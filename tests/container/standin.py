"""The container tests' base images, built once and kept in the test engine's data root until their inputs change.

No registry is reachable where the tests run, so nvcr.io/nvidia/tritonserver and python:3.11-slim cannot be
pulled. In their place:

- a Debian bookworm root made by mmdebstrap from Debian's packages and `docker import`ed;
- standin.Dockerfile on it: target `python` (Debian's Python 3.11 and pip, the API image's base) and target
  `triton` (the stand-in for NVIDIA's image: the nvidia-pytriton wheel's Triton 2.51 laid out as NGC's is,
  Triton's native onnxruntime backend that `make backend` built in /opt/tritonserver/backends/onnxruntime/,
  and numpy and onnxruntime from requirements.lock for the fused one step).

And for `docker compose up --profile monitoring` (test_docker_compose.py), prometheus.Dockerfile: Debian's
`prometheus` package on the same root, in place of prom/prometheus.

Each image's tag ends in a digest of what it is built from; an image with that tag is reused as it is.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonize.lockfile import Pin, read_lock
from tritonize.runtime import native_backend
from tritonize.runtime.instance import STUB_NAME
from tritonize.runtime.local import WHEEL_LIBS_DIR, WHEEL_SERVER_DIR, WHEEL_STUBS_DIR, find_install, server_library

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = Path(__file__).resolve().parent / "standin.Dockerfile"
PROMETHEUS_DOCKERFILE = Path(__file__).resolve().parent / "prometheus.Dockerfile"
LOCK = ROOT / "requirements.lock"
SUITE = "bookworm"
PYTHON_VERSION = "3.11"  # bookworm's; the stub that matches it is copied into the backend
DEBIAN_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates", f"libpython{PYTHON_VERSION}")
# What the stub's interpreter imports for configs/fused.pbtxt (tokenizers comes from docker/Dockerfile's own
# hash-checked step), and the wheel that carries the server.
PYTHON_PINS = ("numpy", "onnxruntime", "flatbuffers", "packaging", "protobuf", "sympy", "mpmath")
TRITON_PINS = ("nvidia-pytriton",)
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
# NGC's layout: the server's libraries in /opt/tritonserver/lib, each backend in /opt/tritonserver/backends/<name>/.
SERVER_LIBS = Path("/opt/tritonserver/lib")
BACKEND_CONTEXT = "onnxruntime"  # the build context's folder: backends/onnxruntime/ as the image holds it


@dataclass(frozen=True)
class Built:
    """An image the tests use: its tag, how long it took to build (0 when reused) and its size."""

    image: str
    seconds: float
    size_mb: float


def digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:12]


def size_mb(client: Any, image: str) -> float:
    return round(client.images.get(image).attrs["Size"] / 1e6, 1)


def existing(client: Any, image: str) -> Built | None:
    from docker.errors import ImageNotFound

    try:
        return Built(image, 0.0, size_mb(client, image))
    except ImageNotFound:
        return None


def requirements(pins: dict[str, Pin], names: tuple[str, ...]) -> str:
    lines = [f"{pins[n].requirement} " + " ".join(f"--hash=sha256:{h}" for h in pins[n].hashes) for n in names]
    return "\n".join(lines) + "\n"


def debian_root(client: Any, workdir: Path) -> Built:
    """The Debian root every image here starts from (mmdebstrap, then `docker import`)."""
    image = f"tritonize-standin-debian:{SUITE}-{digest(SUITE.encode(), ' '.join(DEBIAN_PACKAGES).encode())}"
    if found := existing(client, image):
        return found
    start = time.perf_counter()
    tar = workdir / "debian.tar"
    subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", f"--include={','.join(DEBIAN_PACKAGES)}",
                    SUITE, str(tar)], check=True)
    repository, tag = image.split(":")
    client.api.import_image_from_file(str(tar), repository=repository, tag=tag)
    tar.unlink()
    return Built(image, round(time.perf_counter() - start, 1), size_mb(client, image))


def build(client: Any, context: Path, dockerfile: str, image: str, target: str | None, buildargs: dict[str, str]) -> None:
    """`docker build --network host` through the SDK; the build's last lines on failure."""
    stream = client.api.build(path=str(context), dockerfile=dockerfile, tag=image, target=target, buildargs=buildargs,
                              network_mode="host", rm=True, forcerm=True, decode=True)
    lines: list[str] = []
    for chunk in stream:
        lines.append(str(chunk.get("stream", chunk.get("status", ""))).rstrip())
        if "error" in chunk:
            tail = "\n".join(line for line in lines[-30:] if line)
            raise RuntimeError(f"building {image} failed: {chunk['error']}\n{tail}")


def onnxruntime_backend(context: Path) -> Path:
    """backends/onnxruntime/ as the stand-in holds it, laid out in `context` by NativeBackend.lay_out: the backend
    `make backend` built for the locked onnxruntime, that onnxruntime's library, and libtritonserver.so naming
    the wheel's renamed server library where the image keeps it (SERVER_LIBS; the same locked wheel, so the
    same name)."""
    backend = native_backend.find()
    target = context / BACKEND_CONTEXT
    shutil.rmtree(target, ignore_errors=True)
    backend.lay_out(target, SERVER_LIBS / server_library(find_install()).name)
    return target


def tree_digest(folder: Path) -> bytes:
    """What a laid-out folder is made of: each file's name and bytes, each link's name and target."""
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        h.update(str(path.relative_to(folder)).encode())
        h.update(str(path.readlink()).encode() if path.is_symlink() else path.read_bytes())
    return h.digest()


def standin(client: Any, workdir: Path) -> tuple[Built, Built, Built]:
    """(the Debian root, the `python` image, the `triton` stand-in), each built only when missing."""
    root = debian_root(client, workdir)
    staged = workdir / "standin-backend"
    backend = onnxruntime_backend(staged)
    pins = read_lock(LOCK)
    files = {
        "Dockerfile": DOCKERFILE.read_bytes(),
        "python.txt": requirements(pins, PYTHON_PINS).encode(),
        "triton.txt": requirements(pins, TRITON_PINS).encode(),
        "ca-certificates.crt": CA_BUNDLE.read_bytes(),
    }
    buildargs = {
        "DEBIAN_BASE": root.image,
        "PYTHON_VERSION": PYTHON_VERSION,
        "WHEEL_SERVER_DIR": WHEEL_SERVER_DIR,
        "WHEEL_LIBS_DIR": WHEEL_LIBS_DIR,
        "WHEEL_STUBS_DIR": WHEEL_STUBS_DIR,
        "STUB_NAME": STUB_NAME,
    }
    tag = digest(*files.values(), repr(sorted(buildargs.items())).encode(), tree_digest(backend))
    images = {target: f"tritonize-standin-{target}:{tag}" for target in ("python", "triton")}
    built = {target: existing(client, image) for target, image in images.items()}
    if all(built.values()):
        shutil.rmtree(staged)
        return root, built["python"], built["triton"]  # type: ignore[return-value]

    context = workdir / "standin-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    for name, data in files.items():
        (context / name).write_bytes(data)
    wheels = workdir / "wheels"  # kept between builds: pip skips what it has already downloaded
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                    "--require-hashes", "-r", str(context / "python.txt"), "-r", str(context / "triton.txt"),
                    "-d", str(wheels)], check=True)
    shutil.copytree(wheels, context / "wheels")
    shutil.copytree(backend, context / BACKEND_CONTEXT, symlinks=True)
    shutil.rmtree(staged)
    for target, image in images.items():
        if built[target] is None:
            start = time.perf_counter()
            build(client, context, "Dockerfile", image, target, buildargs)
            built[target] = Built(image, round(time.perf_counter() - start, 1), size_mb(client, image))
    shutil.rmtree(context)
    return root, built["python"], built["triton"]  # type: ignore[return-value]


def prometheus(client: Any, root: Built, workdir: Path) -> Built:
    """Debian's Prometheus on the Debian root (prometheus.Dockerfile), built only when missing."""
    image = f"tritonize-standin-prometheus:{digest(PROMETHEUS_DOCKERFILE.read_bytes(), root.image.encode())}"
    if found := existing(client, image):
        return found
    context = workdir / "prometheus-context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    (context / "Dockerfile").write_bytes(PROMETHEUS_DOCKERFILE.read_bytes())
    start = time.perf_counter()
    build(client, context, "Dockerfile", image, None, {"DEBIAN_BASE": root.image})
    shutil.rmtree(context)
    return Built(image, round(time.perf_counter() - start, 1), size_mb(client, image))
