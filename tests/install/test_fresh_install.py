"""`make run` on an ordinary machine: a fresh copy of the checkout, pip's configuration of this machine switched
off, PyPI and PyTorch's CPU index named explicitly (a loopback stand-in serves the index's one file the lock needs,
the CPU torch), and the onnxruntime backend fetched from upstream's archives (loopback stand-ins for GitHub and
Debian's pool where this machine reaches neither; the real hosts elsewhere). Run by `make test-install`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from support import REPO_ROOT, upstream
from tritonize.runtime import native_backend, operator_library
from tritonize.runtime.machine import free_ports

PYPI = os.environ.get("TRITONIZE_PYPI", "https://pypi.org/simple")
VENDORED = REPO_ROOT.parent / "shared" / "vendor" / f"triton-{native_backend.RELEASE}"
OPERATOR_VENDORED = REPO_ROOT.parent / "shared" / "vendor" / f"onnxruntime-extensions-{operator_library.VERSION}"


def checkout_copy(target: Path) -> Path:
    """What a clone of this checkout would hold, with its changes not yet committed: tracked and untracked files
    that git does not ignore."""
    listed = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = REPO_ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


TORCH_PIN = next(line.split()[0] for line in (REPO_ROOT / "requirements.lock").read_text().splitlines()
                 if line.startswith("torch=="))


def locked_torch(folder: Path) -> Path:
    """The lock's torch wheel, as this machine's own pip finds it (its wheel folder, or PyTorch's index)."""
    pin = TORCH_PIN
    for extra in ([], ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]):
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               pin, "-d", str(folder), *extra], capture_output=True, text=True)
        if done.returncode == 0:
            return next(folder.glob("torch-*.whl"))
    pytest.fail(f"this machine's pip finds no {pin}: {done.stderr[-500:]}")


def ordinary_environment(**extra: str) -> dict[str, str]:
    """This environment without pip's configuration: no PIP_* variables, no configuration files, PyPI by name."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL=PYPI, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    env.pop("VIRTUAL_ENV", None)
    return env


def make(checkout: Path, env: dict, *args: str, timeout: float = 1500) -> str:
    done = subprocess.run(["make", "--no-print-directory", "-C", str(checkout), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"make {' '.join(args)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


def test_make_run_from_pypi_and_pytorchs_cpu_index_with_the_backend_fetched(tmp_path: Path) -> None:
    checkout = checkout_copy(tmp_path / "tritonize")
    torch_index = upstream.simple_index([locked_torch(tmp_path / "wheels")], tmp_path / "torch-index")
    hosts = (upstream.upstream_layout(VENDORED, tmp_path / "upstream", operator_sources=OPERATOR_VENDORED)
             if VENDORED.is_dir() and OPERATOR_VENDORED.is_dir() else None)
    http, grpc, metrics, api = free_ports(4)
    with upstream.served(torch_index) as index_url, upstream.served(hosts or tmp_path) as hosts_url:
        backend = ({"BACKEND_GITHUB": f"{hosts_url}/github", "BACKEND_DEBIAN": f"{hosts_url}/debian"}
                   if hosts else {})
        env = ordinary_environment(TORCH_INDEX=index_url, **backend)
        # No pip configuration: without the index the lock's torch is nowhere (the check is not vacuous).
        probe = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(tmp_path / "x"),
                                TORCH_PIN], env=env, capture_output=True, text=True)
        assert probe.returncode != 0
        said = make(checkout, env, "install")
        venv = checkout / ".venv" / "bin" / "python"
        version = subprocess.run([str(venv), "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        assert version.endswith("+cpu"), version
        said = make(checkout, env, "backend")
        assert "fetching" in said and "built " in said, said[-2000:]
        ports = [f"HTTP_PORT={http}", f"GRPC_PORT={grpc}", f"METRICS_PORT={metrics}", f"API_PORT={api}"]
        try:
            said = make(checkout, env, "run", *ports, "DEPLOY_FLAGS=--variant production")
            body = b'{"model": "minilm", "input": ["Triton serves raw strings."]}'
            request = urllib.request.Request(f"http://127.0.0.1:{api}/v1/embeddings", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=30) as response:
                answer = json.loads(response.read())
            assert len(answer["data"][0]["embedding"]) == 384
        finally:
            make(checkout, env, "stop", *ports, timeout=120)
