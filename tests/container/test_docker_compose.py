"""`docker compose up`, for real: the project's docker-compose.yml on the test engine, with the stand-ins.

Compose v2 is Debian trixie's docker-compose 2.26.1, a CLI plugin of Debian's docker CLI that
tests/container/engine.sh fetches with `apt-get download` (bookworm's docker-compose 1.29 refuses the file).
The file is used as committed (`--file docker-compose.yml`), with the variables it documents:
  TRITON_BASE_IMAGE, API_BASE_IMAGE   the stand-ins (standin.py) in place of NVIDIA's image and python:3.11-slim;
  TRITON_REPO, the ports              the MiniLM repository, free loopback ports;
and one override file for what this engine and host need and a user's would not:
  - `build.network: host` for the two builds: the engine has no default bridge, and pip must reach PyPI;
  - `ulimits.memlock` = the host's hard limit, only where root lacks CAP_SYS_RESOURCE (NVIDIA's -1 fails there);
  - the prometheus service's image: Debian's Prometheus 2.42 (prometheus.Dockerfile) for prom/prometheus.
`up --wait triton-cpu api prometheus` builds both images with compose's own builder (BuildKit), starts the three
services of the CPU and monitoring setups, and waits for the health checks; the tests then compare the answers
with the local server's, read the containers' settings, and `down` with requests in flight.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from support.container import (
    API_ATOL,
    LONG,
    MEMLOCK,
    MODEL_STEP,
    NAME,
    TEXTS,
    assert_loopback_only,
    assert_same,
    embedding,
    max_abs,
    record,
    wait_for,
)
from container.standin import prometheus
from tritonize.client import TextClient
from tritonize.runtime import container as ct
from tritonize.runtime.base import Endpoints, http_get
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.machine import free_ports
from tritonize.spec import FUSED_VARIANT, PRODUCTION_VARIANT

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
API_DOCKERFILE = ROOT / "docker" / "api.Dockerfile"
PROJECT = "tritonize-test-compose"
SERVICES = ("triton-cpu", "api", "prometheus")  # the CPU host's line of the file's header, with Prometheus
PROFILES = ("--profile", "cpu", "--profile", "monitoring")  # `down` stops the services of the profiles it is given
DOCKER = os.environ.get("TRITONIZE_DOCKER_CLI", "docker")  # Debian's CLI, with the plugin in $DOCKER_CONFIG
IN_FLIGHT = 16

pytestmark = pytest.mark.usefixtures("local_triton")


def clean_environment() -> dict[str, str]:
    """This process's environment without the variables the compose file reads and compose's own, so that what
    the tests set is all that differs from a plain `docker compose up`."""
    names = set(re.findall(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", COMPOSE_FILE.read_text()))
    return {k: v for k, v in os.environ.items() if k not in names and not k.startswith("COMPOSE_")}


@dataclass
class Compose:
    env: dict[str, str]
    override: Path
    endpoints: Endpoints  # Triton's, as published
    api_port: int
    prometheus_port: int
    client: Any  # the docker SDK's, to read what compose made

    def run(self, *args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
        cmd = [DOCKER, "compose", "--project-name", PROJECT, "--file", str(COMPOSE_FILE), "--file", str(self.override),
               *args]
        return subprocess.run(cmd, cwd=ROOT, env=self.env if env is None else env, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def containers(self, service: str | None = None) -> list[Any]:
        labels = [f"com.docker.compose.project={PROJECT}"]
        if service:
            labels.append(f"com.docker.compose.service={service}")
        return self.client.containers.list(all=True, filters={"label": labels})

    def container(self, service: str) -> Any:
        (container,) = self.containers(service)
        return container

    def infer(self, texts: list[str], protocol: str = "grpc") -> dict[str, np.ndarray]:
        url = self.endpoints.grpc if protocol == "grpc" else self.endpoints.http
        with TextClient(url, NAME, protocol=protocol) as client:
            return client.infer(texts)

    def prometheus_query(self, query: str) -> list[dict]:
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
        status, body = http_get(url, timeout=5.0)
        assert status == 200, body[:300]
        return json.loads(body)["data"]["result"]


def failed(what: str, result: subprocess.CompletedProcess) -> str:
    return f"{what} exited {result.returncode}:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"


@pytest.fixture(scope="module")
def compose(engine, engine_dir, images, served_repo, tmp_path_factory) -> Compose:
    start = time.perf_counter()
    standin_prometheus = prometheus(engine, images["root"], engine_dir)
    record("standin_prometheus", {"image": standin_prometheus.image, "build_s": standin_prometheus.seconds,
                                  "size_mb": standin_prometheus.size_mb})
    http, grpc, metrics, api, prom = free_ports(5)
    services: dict[str, dict] = {
        "triton-cpu": {"build": {"network": "host"}},
        "api": {"build": {"network": "host"}},
        "prometheus": {"image": standin_prometheus.image},
    }
    if MEMLOCK != -1:
        services["triton-cpu"]["ulimits"] = {"memlock": MEMLOCK}
    override = tmp_path_factory.mktemp("compose") / "test-engine.override.yml"
    override.write_text("# The test engine's needs over docker-compose.yml (tests/container/test_docker_compose.py)\n"
                        + yaml.safe_dump({"services": services}, sort_keys=False))
    env = clean_environment() | {
        "TRITON_REPO": str(served_repo),
        ct.BASE_IMAGE_VARIABLE: images["triton"].image,
        "API_BASE_IMAGE": images["python"].image,
        "TRITON_HTTP_PORT": str(http), "TRITON_GRPC_PORT": str(grpc), "TRITON_METRICS_PORT": str(metrics),
        "API_PORT": str(api), "PROMETHEUS_PORT": str(prom),
    }
    deployed = Compose(env, override, Endpoints("127.0.0.1", http, grpc, metrics), api, prom, engine)
    deployed.run(*PROFILES, "down", "--volumes", "--timeout", "5")  # what a killed run left
    version = deployed.run("version", "--short")
    assert version.returncode == 0, failed("docker compose version", version)
    record("compose_version", version.stdout.strip())
    up_start = time.perf_counter()
    up = deployed.run("up", "--detach", "--wait", "--wait-timeout", "300", *SERVICES)
    assert up.returncode == 0, failed("docker compose up", up)
    record("compose_up_s", round(time.perf_counter() - up_start, 1))
    record("compose_setup_s", round(time.perf_counter() - start, 1))
    yield deployed
    deployed.run(*PROFILES, "down", "--volumes", "--timeout", "10")


@pytest.fixture(scope="module")
def local_answers(served_repo, local_options, tmp_path_factory) -> dict[str, dict[str, np.ndarray]]:
    """The local server's answers on the same repository (LocalRuntime), by variant: the production configs on the
    native backend the stand-in carries too, and the fused one step."""
    answers = {}
    for variant in (PRODUCTION_VARIANT, FUSED_VARIANT):
        options = local_options(served_repo, tmp_path_factory.mktemp(f"local-{variant}"))
        with LocalRuntime(options, quiet=True, variant=variant) as endpoints:
            with TextClient(endpoints.grpc, NAME, protocol="grpc") as client:
                answers[variant] = client.infer(TEXTS)
    return answers


# --------------------------------------------------------------------------- what compose builds


def test_the_serving_image_builds_on_nvidias_image_unless_told_otherwise(compose, images) -> None:
    """compose's own interpolation of the file: BASE_IMAGE is NVIDIA's image of TRITON_RELEASE unless
    TRITON_BASE_IMAGE names another, and the image compose built here carries the stand-in as its base."""

    def build_args(env: dict[str, str]) -> dict[str, dict[str, str]]:
        result = compose.run(*PROFILES, "config", "--format", "json", env=env)
        assert result.returncode == 0, failed("docker compose config", result)
        services = json.loads(result.stdout)["services"]
        return {name: services[name]["build"]["args"] for name in ("triton", "triton-cpu", "api")}

    plain = clean_environment()
    defaults = build_args(plain)
    assert defaults["triton"]["BASE_IMAGE"] == defaults["triton-cpu"]["BASE_IMAGE"] == ct.base_image()
    assert defaults["triton"]["TRITON_RELEASE"] == ct.DEFAULT_TRITON_RELEASE
    assert build_args(plain | {"TRITON_RELEASE": "25.12"})["triton"]["BASE_IMAGE"] == ct.base_image("25.12")
    api_default = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", API_DOCKERFILE.read_text(), re.M).group(1)
    assert defaults["api"]["PYTHON_IMAGE"] == api_default == ct.API_BASE_IMAGE
    told = build_args(compose.env)
    assert told["triton-cpu"]["BASE_IMAGE"] == images["triton"].image
    assert told["api"]["PYTHON_IMAGE"] == images["python"].image
    labels = compose.client.images.get(ct.default_image()).labels
    assert labels[ct.BASE_LABEL] == images["triton"].image
    assert compose.container("triton-cpu").image.id == compose.client.images.get(ct.default_image()).id


# --------------------------------------------------------------------------- serving


def test_up_goes_healthy_and_answers_as_the_local_server_does(compose, local_answers) -> None:
    """Raw strings over HTTP and gRPC to Triton, and /v1/embeddings to the API (which reaches Triton by the
    service's alias over gRPC), each equal to the local server's answers on the same repository: its production
    configs (ATOL for Triton's outputs, API_ATOL for the API's normalized JSON floats) and its fused one step."""
    for service in ("triton-cpu", "api"):
        container = compose.container(service)
        assert container.attrs["State"]["Health"]["Status"] == "healthy", service
    status, body = http_get(f"{compose.endpoints.http}/v2/models/{MODEL_STEP}/config")
    assert status == 200 and json.loads(body)["backend"] == "onnxruntime"  # the production configs
    triton = {protocol: compose.infer(TEXTS, protocol) for protocol in ("http", "grpc")}
    request = urllib.request.Request(
        f"http://127.0.0.1:{compose.api_port}/v1/embeddings", method="POST",
        headers={"Content-Type": "application/json"},
        data=json.dumps({"model": NAME, "input": TEXTS, "encoding_format": "float"}).encode())
    with urllib.request.urlopen(request, timeout=30) as response:
        api = np.array([row["embedding"] for row in sorted(json.loads(response.read())["data"], key=lambda r: r["index"])])
    figures = {}
    for variant, local in local_answers.items():
        for protocol, outputs in triton.items():
            assert set(outputs) == set(local), (variant, protocol)
            for name, value in outputs.items():
                assert_same(value, local[name], (variant, protocol, name))
            figures[f"{protocol}_vs_local_{variant}"] = max_abs(embedding(outputs), embedding(local))
        normalized = embedding(local) / np.linalg.norm(embedding(local), axis=1, keepdims=True)
        assert api.shape == normalized.shape and max_abs(api, normalized) <= API_ATOL, variant
        figures[f"api_vs_local_{variant}"] = max_abs(api, normalized)
    record("compose_vs_local_max_abs", figures)


def test_the_repository_is_mounted_read_only_and_every_port_is_on_loopback(compose, served_repo) -> None:
    for service in ("triton-cpu", "api"):
        container = compose.container(service)
        (mount,) = [m for m in container.attrs["Mounts"] if m["Destination"] == ct.MODELS_DIR]
        assert mount["Type"] == "bind" and mount["RW"] is False and Path(mount["Source"]) == served_repo, service
        code, out = container.exec_run(["touch", f"{ct.MODELS_DIR}/written"])
        assert code != 0 and b"Read-only file system" in out, service
    assert compose.container("api").attrs["HostConfig"]["ReadonlyRootfs"] is True
    # Triton's own HTTP port is not published; TRITON_HTTP_PORT reaches the API's front for Triton's /v2 routes.
    expected = {
        "triton-cpu": {f"{ct.CONTAINER_PORTS['grpc']}/tcp": [compose.endpoints.grpc_port],
                       f"{ct.CONTAINER_PORTS['metrics']}/tcp": [compose.endpoints.metrics_port]},
        "api": {"8080/tcp": [compose.api_port, compose.endpoints.http_port]},
        "prometheus": {"9090/tcp": [compose.prometheus_port]},
    }
    for service, ports in expected.items():
        published = compose.container(service).attrs["NetworkSettings"]["Ports"]
        for inside, outside in ports.items():
            assert sorted(published[inside], key=lambda b: b["HostPort"]) == sorted(
                ({"HostIp": "127.0.0.1", "HostPort": str(port)} for port in outside), key=lambda b: b["HostPort"])
    assert not compose.container("triton-cpu").attrs["NetworkSettings"]["Ports"].get(
        f"{ct.CONTAINER_PORTS['http']}/tcp")
    assert_loopback_only([port for ports in expected.values() for found in ports.values() for port in found])


def test_the_tensorrt_engine_cache_is_a_named_volume_the_server_writes(compose) -> None:
    """Where the configs' trt_engine_cache_path points: a named volume (not the container's layer), writable
    by the server's uid 1000, so a new container finds the engines (the last test here)."""
    container = compose.container("triton-cpu")
    (mount,) = [m for m in container.attrs["Mounts"] if m["Destination"] == ct.TRT_CACHE_DIR]
    assert mount["Type"] == "volume" and mount["Name"] == f"{PROJECT}_{ct.TRT_CACHE_VOLUME}" and mount["RW"] is True
    code, out = container.exec_run(["sh", "-c", f"id -u && touch {ct.TRT_CACHE_DIR}/engine.probe"])
    assert code == 0 and out.split()[0] == b"1000", out


def test_prometheus_scrapes_triton_and_the_api(compose) -> None:
    """The monitoring profile's Prometheus (Debian's, standing in for prom/prometheus) with the project's
    monitoring/prometheus/ folder: both targets up, the answers above counted in both, and the rules beside the
    configuration loaded and evaluated without error."""

    def targets() -> dict[str, str]:
        status, body = http_get(f"http://127.0.0.1:{compose.prometheus_port}/api/v1/targets", timeout=5.0)
        if status != 200:
            return {}
        return {t["labels"]["instance"]: t["health"] for t in json.loads(body)["data"]["activeTargets"]}

    wait_for(lambda: targets() == {"tritonserver:8002": "up", "api:8080": "up"}, 60, 1.0)

    def counted(query: str) -> bool:
        return any(float(r["value"][1]) > 0 for r in compose.prometheus_query(query))

    wait_for(lambda: counted(f'nv_inference_request_success{{model="{NAME}"}}'), 60, 1.0)
    wait_for(lambda: counted(f'tritonize_api_requests_total{{route="/v1/embeddings",model="{NAME}",status="200"}}'),
             60, 1.0)

    def rule_health() -> dict[str, str]:
        status, body = http_get(f"http://127.0.0.1:{compose.prometheus_port}/api/v1/rules", timeout=5.0)
        if status != 200:
            return {}
        return {r.get("name"): r["health"] for g in json.loads(body)["data"]["groups"] for r in g["rules"]}

    from tritonize.runtime import monitoring

    expected = {a.name for a in monitoring.ALERTS} | {monitoring.DRIFT.record}
    wait_for(lambda: set(rule_health()) == expected and set(rule_health().values()) == {"ok"}, 60, 1.0)


# --------------------------------------------------------------------------- down


def test_down_answers_every_request_in_flight(compose) -> None:
    """`docker compose down` while IN_FLIGHT requests of 8 long texts each are in flight through the two steps:
    SIGTERM reaches Triton through the watchdog once the API's gRPC channel has closed, every request is
    answered, and the named volumes stay (no --volumes)."""
    container = compose.container("triton-cpu")
    log: list[str] = []
    follower = threading.Thread(target=lambda: log.extend(
        line.decode("utf-8", "replace") for line in container.logs(stream=True, follow=True, since=int(time.time()))),
        daemon=True)
    follower.start()
    results: list[Any] = [None] * IN_FLIGHT
    done = [0.0] * IN_FLIGHT
    started = threading.Barrier(IN_FLIGHT + 1)

    def one(i: int) -> None:
        started.wait()
        try:
            results[i] = compose.infer([LONG] * 8, "http")
        except Exception as exc:  # noqa: BLE001 - reported below
            results[i] = exc
        done[i] = time.monotonic()

    with ThreadPoolExecutor(IN_FLIGHT) as pool:
        futures = [pool.submit(one, i) for i in range(IN_FLIGHT)]
        started.wait()
        time.sleep(0.3)
        start = time.monotonic()
        down = compose.run(*PROFILES, "down", timeout=180)
        down_s = time.monotonic() - start
        for future in futures:
            future.result()
    follower.join(30)
    assert down.returncode == 0, failed("docker compose down", down)
    unanswered = [r for r in results if not isinstance(r, dict)]
    assert not unanswered, unanswered[:3]
    assert all(embedding(r).shape[0] == 8 for r in results)
    # The requests reach Triton over gRPC from the API's front, which Triton 2.51 does not wait for on SIGTERM:
    # the API answers what it holds and closes its channel, the watchdog then passes SIGTERM on, and Triton
    # unloads the models.
    text = "".join(log)
    assert "Signal (15) received" in text, text[-2000:]
    drained = re.search(r"tritonize-watchdog: drained in (\d+\.\d)s", text.split("Signal (15) received")[0])
    assert drained, text[-2000:]
    assert "successfully unloaded" in text
    answered_after_down = sum(t > start for t in done)
    assert answered_after_down >= 1
    assert not compose.containers()
    assert f"{PROJECT}_{ct.TRT_CACHE_VOLUME}" in {v.name for v in compose.client.volumes.list()}
    record("compose_down", {"in_flight": IN_FLIGHT, "answered": IN_FLIGHT - len(unanswered), "down_s": round(down_s, 1),
                            "answered_after_down_began": answered_after_down,
                            "watchdog_drain_s": float(drained.group(1))})


def test_up_again_finds_the_engine_cache_of_the_last_container(compose) -> None:
    """A new container (what `down` / `up`, or a changed setting, makes) mounts the same volume: what the last
    one wrote into the engine cache is there, so TensorRT's engines would not be built again."""
    up = compose.run("up", "--detach", "--wait", "--wait-timeout", "300", "triton-cpu")
    assert up.returncode == 0, failed("docker compose up", up)
    container = compose.container("triton-cpu")
    code, out = container.exec_run(["test", "-f", f"{ct.TRT_CACHE_DIR}/engine.probe"])
    assert code == 0, out
    assert compose.infer(["still serving"])
