"""Fixtures of the container tests: the engine `make test-container` started, the stand-in images, the repository.

Every test here talks to a real Docker engine and a real Triton. They run only under
tests/container/engine.sh, which starts a dockerd of its own (DOCKER_HOST on its own socket); they refuse
the system's engine.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from container.standin import Built, standin
from support.container import FIGURES, record

SYSTEM_SOCKETS = ("unix:///var/run/docker.sock", "unix:///run/docker.sock")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.container)


@pytest.fixture(scope="session")
def engine_dir() -> Path:
    host = os.environ.get("DOCKER_HOST", "")
    if (os.environ.get("TRITONIZE_CONTAINER_TESTS") != "1" or not host.startswith("unix://")
            or host in SYSTEM_SOCKETS or "TRITONIZE_CONTAINER_DIR" not in os.environ):
        pytest.fail("the container tests run under their own engine: make test-container")
    directory = Path(os.environ["TRITONIZE_CONTAINER_DIR"])
    yield directory
    (directory / "figures.json").write_text(json.dumps(FIGURES, indent=2) + "\n")


@pytest.fixture(scope="session")
def engine(engine_dir) -> Any:
    import docker

    client = docker.from_env(timeout=600)
    assert client.ping()
    return client


@pytest.fixture(scope="session")
def images(engine, engine_dir) -> dict[str, Built]:
    start = time.perf_counter()
    root, python, triton = standin(engine, engine_dir)
    for key, built in (("debian_root", root), ("standin_python", python), ("standin_triton", triton)):
        record(key, {"image": built.image, "build_s": built.seconds, "size_mb": built.size_mb})
    record("standin_total_s", round(time.perf_counter() - start, 1))
    return {"root": root, "python": python, "triton": triton}


DRAIN_BUDGET_MS = 10_000  # served_repo's queue budget


def readable_copy(source: Path, budget_ms: int | None = None):
    """A copy of a repository where the containers' uid 1000 can read it (and its queue budget, where given)."""
    from tritonize.repository import reconfigure
    from tritonize.spec.options import Overrides

    directory = Path(tempfile.mkdtemp(prefix="tritonize-container-"))
    directory.chmod(0o755)
    repo = directory / "repo"
    shutil.copytree(source, repo)
    if budget_ms:
        reconfigure(repo, Overrides(queue_budget_ms=budget_ms))
    for path in [repo, *repo.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return directory, repo


@pytest.fixture(scope="session")
def served_repo(minilm_python_repo) -> Path:
    """MiniLM with the Python tokenizer step (tests/conftest.py): what the container does with Python steps (stubs
    killed, the watchdog, the fused variant, the drain). Its queue budget is DRAIN_BUDGET_MS: the drain tests send
    some 2 s of work at once, and with the default budget (a second) the production queues refuse what waited
    longer, which is the budget working, not a drain failing."""
    directory, repo = readable_copy(minilm_python_repo, DRAIN_BUDGET_MS)
    yield repo
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="session")
def graph_repo(minilm_repo) -> Path:
    """MiniLM as generate writes it by default: tokenized in ONNX graphs, no Python step."""
    directory, repo = readable_copy(minilm_repo)
    yield repo
    shutil.rmtree(directory, ignore_errors=True)
