"""The HTTP API as the tests run it: started in front of a local Triton with a test key (`Api`, `api_over_triton`),
a Matryoshka embedder served for the route tests, and the schemathesis fuzzing of its own /openapi.json."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.stopping import stop_later

KEY = "test-key-0123456789"


@dataclass
class Api:
    url: str
    key: str | None
    process: subprocess.Popen

    def call(self, method: str, path: str, body: bytes | dict | None = None, headers: dict | None = None,
             key: str | None = "default") -> tuple[int, Any, Any]:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        hdrs = {"Content-Type": "application/json"} if isinstance(body, dict) else {}
        key = self.key if key == "default" else key
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        hdrs.update(headers or {})
        req = urllib.request.Request(self.url + path, data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.headers, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers, json.loads(exc.read() or b"null")


def start_api(repository: Path, grpc: str, *extra: str, key: str | None = None) -> Api:
    from tritonize.runtime.machine import free_ports

    (port,) = free_ports(1)
    args = [sys.executable, "-m", "tritonize.cli", "api", "-r", str(repository), "--grpc-url", grpc,
            "--port", str(port), *extra] + (["--api-key", key] if key else [])
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    api = Api(f"http://127.0.0.1:{port}", key, process)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(process.stdout.read().decode())
        try:
            if api.call("GET", "/health")[0] == 200:
                return api
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError("the API did not become healthy")


def stop(api: Api) -> None:
    api.process.terminate()
    api.process.wait(timeout=20)


@contextlib.contextmanager
def api_over_triton(options, *args: str, key: str | None = None) -> Iterator[tuple[Any, Api]]:
    """A local Triton serving `options` (ServerOptions) and the API in front of it: (endpoints, api). Both are
    stopped after; the server also when the API fails to start, so it never outlives the fixture."""
    from tritonize.runtime.local import LocalRuntime

    runtime = LocalRuntime(options, quiet=True)
    endpoints = runtime.up()
    try:
        api = start_api(options.repository, endpoints.grpc, "--http-url", endpoints.http, *args, key=key)
        try:
            yield endpoints, api
        finally:
            stop(api)
    finally:
        stop_later(runtime)


@pytest.fixture(scope="module")
def matryoshka_repo(tmp_path_factory):
    """A tiny sentence-transformers embedder declared Matryoshka-capable at 32 (served), 16 and 8 values."""
    from support.tiny_models import TinyRepo, build_embedding_model
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    base = tmp_path_factory.mktemp("api-emb")
    source = build_embedding_model(base / "src")
    repo = generate(GenerateOptions(model=str(source), name="emb", output=str(base / "repo"),
                                    matryoshka_dims=[32, 16, 8]))
    return TinyRepo(source=Path(source), repository=Path(repo), name="emb")


@pytest.fixture(scope="module")
def served(matryoshka_repo, local_triton, local_options, tmp_path_factory):
    options = local_options(matryoshka_repo.repository, tmp_path_factory.mktemp("api-run"))
    with api_over_triton(options, "--max-client-batch-size", "8", key=KEY) as (endpoints, api):
        yield matryoshka_repo, endpoints, api


# Every check: a server error, a status, content type or header the document does not declare, a response off its
# schema, a schema-valid request refused (ST202), a schema-violating one accepted (ST201), a method without `Allow`,
# a request without the key answered.
CHECKS = ("all",)
# Schema-valid requests a route may still refuse, and why: the statuses positive_data_acceptance accepts
# besides schemathesis' own (2xx, 401, 404 for a model of no such name, 429).
ACCEPTED = ["2xx", "3xx", "401", "403", "404", "409", "429"]
# Where several models are served, routes that read any model's tokenizer refuse what only the named one lacks
# (api/openapi.py writes the largest vocabulary's bound): /decode, an id beyond the named model's vocabulary.
ANY_MODEL = ("/decode",)
FUZZ_TIMEOUT_S = 300


def accepting(route: str, *statuses: str) -> str:
    """A schemathesis operation section: positive_data_acceptance also takes these statuses on this route."""
    listed = ", ".join(f'"{s}"' for s in (*ACCEPTED, *statuses))
    return f'[[operations]]\ninclude-path = "{route}"\nchecks.positive_data_acceptance.expected-statuses = [{listed}]\n'


def fuzz(url: str, workdir: Path, config: str = "", key: str | None = None, seed: int = 34,
         examples: int = 8) -> str:
    """schemathesis against the live API from its own /openapi.json, positive and negative data; its report on
    failure, its summary otherwise."""
    # A request over this server's bounds (more texts than --max-client-batch-size) is refused with 413.
    refused = ", ".join(str(s) for s in (400, 401, 403, 404, 405, 406, 409, 413, 415, 422, 428, 429))
    (workdir / "schemathesis.toml").write_text(f"[checks.negative_data_rejection]\nexpected-statuses = [{refused}]\n\n"
                                               + config)
    command = [str(Path(sys.executable).with_name("schemathesis")), "--config-file", str(workdir / "schemathesis.toml"),
               "run", f"{url}/openapi.json", "--checks", ",".join(CHECKS), "--max-examples", str(examples),
               "--phases", "examples,coverage,fuzzing", "--mode", "all", "--workers", "1", "--seed", str(seed),
               "--generation-database", "none", "--no-color", "--report-dir", str(workdir / "report")]
    command += ["--header", f"Authorization: Bearer {key}"] if key else []
    done = subprocess.run(command, capture_output=True, text=True, timeout=FUZZ_TIMEOUT_S, cwd=workdir)
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    # Every documented operation was reached: as many as the served document lists (the tasks' routes included).
    request = urllib.request.Request(f"{url}/openapi.json", headers={"Authorization": f"Bearer {key}"} if key else {})
    with urllib.request.urlopen(request, timeout=30) as resp:
        operations = sum(len(methods) for methods in json.load(resp)["paths"].values())
    assert f"Tested: {operations}" in done.stdout, done.stdout[-3000:]
    return done.stdout[done.stdout.rfind("SUMMARY"):]
