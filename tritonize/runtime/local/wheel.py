"""Where the local server comes from: the tritonserver binary, its libraries and the Python-backend stub, as the
nvidia-pytriton wheel lays them out in site-packages (the container tests' stand-in image is laid out from it too)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ...errors import TritonizeError
from .. import machine
from ..instance import STUB_NAME

# The wheel's layout, in site-packages (the container tests' stand-in image is laid out from it too):
WHEEL_SERVER_DIR = "pytriton/tritonserver"  # bin/tritonserver, backends/python/, caches/, the stubs
WHEEL_LIBS_DIR = "nvidia_pytriton.libs"  # the server's shared libraries (libtritonserver, a libcudart, ...)
WHEEL_STUBS_DIR = "python_backend_stubs"  # <X.Y>/triton_python_backend_stub, one per Python version
WHEEL_SERVER_LIBRARY = "libtritonserver*.so"  # in WHEEL_LIBS_DIR, renamed with a hash by the wheel's build


@dataclass(frozen=True)
class TritonInstall:
    """The server binary, its libraries and the Python backend, as the wheel lays them out."""

    server: Path
    libs: Path
    python_backend: Path
    stub: Path
    python_bin: Path  # first on PATH: how the stub finds this environment's packages


def find_install(tritonserver: Path | None = None) -> TritonInstall:
    """Locate the wheel's server and the stub for the running interpreter."""
    try:
        import pytriton
    except ModuleNotFoundError:
        raise TritonizeError(
            "the local runtime needs the nvidia-pytriton wheel (it ships the tritonserver binary)",
            hint="pip install 'nvidia-pytriton>=0.7'  (or: pip install -e '.[local]')",
        ) from None
    site = Path(pytriton.__file__).resolve().parents[1]
    root = site / WHEEL_SERVER_DIR
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        server=Path(tritonserver) if tritonserver else root / "bin" / "tritonserver",
        libs=site / WHEEL_LIBS_DIR,
        python_backend=root / "backends" / "python",
        stub=root / WHEEL_STUBS_DIR / version / STUB_NAME,
        python_bin=Path(sys.prefix) / "bin",
    )
    if not install.server.is_file():
        raise TritonizeError(f"no tritonserver binary at {install.server}", hint="reinstall nvidia-pytriton")
    if not install.stub.is_file():
        raise TritonizeError(
            f"nvidia-pytriton has no Python-backend stub for Python {version}",
            hint="use Python 3.8-3.13 for this environment",
        )
    return install


def missing_libraries(binary: Path, libs: Path) -> list[str]:
    """Shared libraries `binary` cannot find (the stub links the system libpython)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        import ctypes.util

        name = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return [] if ctypes.util.find_library(name) else [f"lib{name}.so.1.0"]
    env = {**os.environ, "LD_LIBRARY_PATH": machine.join_path(str(libs), os.environ.get("LD_LIBRARY_PATH"))}
    result = subprocess.run([ldd, str(binary)], capture_output=True, text=True, env=env, check=False)
    return [line.split("=>")[0].strip() for line in result.stdout.splitlines() if "not found" in line]


def server_library(install: TritonInstall) -> Path:
    """The wheel's libtritonserver, which a backend built elsewhere links by its plain name."""
    found = sorted(install.libs.glob(WHEEL_SERVER_LIBRARY))
    if not found:
        raise TritonizeError(f"no {WHEEL_SERVER_LIBRARY} in {install.libs}", hint="reinstall nvidia-pytriton")
    return found[0]


def check_install(install: TritonInstall) -> None:
    missing = missing_libraries(install.stub, install.libs)
    if missing:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise TritonizeError(
            f"the Python-backend stub cannot load {', '.join(missing)}",
            hint=f"install the system Python library: apt-get install libpython{version}",
        )
