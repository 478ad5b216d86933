"""`deploy.py docker up | status | logs | down` end to end, on a real engine, with the stand-in for NVIDIA's image.

The serving image is built by `deploy.py docker up` itself (the docker SDK, docker/Dockerfile's every step)
FROM the stand-in (standin.py), and serves the MiniLM repository's production configs, each step's
config.pbtxt, as NVIDIA's image does: the tokenizer step on the Python backend, the model step on Triton's
native onnxruntime backend (the stand-in carries the one `make backend` builds from the r24.10 release
sources), the ensemble between them. So the health check, the watchdog's restarts and the drain run on that
two-step path. One test serves the fused step (`--config-name fused`) from the same image.
The containers share a user-defined network, as compose's services do: Triton's ports are published on
127.0.0.1 by the engine, and the API container reaches Triton by its name over gRPC. (The engine has no
default bridge and sets no iptables rules, so builds use the host's network to reach PyPI.)
`docker compose up` itself: test_docker_compose.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from support.container import (
    API_ATOL,
    LONG,
    MEMLOCK,
    MODEL_STEP,
    NAME,
    STATISTICS_STEP,
    TEXTS,
    TOKENIZER_STEP,
    assert_loopback_only,
    assert_same,
    embedding,
    max_abs,
    record,
    wait_for,
)
from tritonize.client import TextClient
from tritonize.runtime import container as ct
from tritonize.runtime import docker as dk
from tritonize.runtime.base import Endpoints, http_get
from tritonize.runtime.instance import STUB_NAME
from tritonize.runtime.local import LocalRuntime
from tritonize.serving.watchdog import RESTART_LINE
from tritonize.spec import PRODUCTION_VARIANT

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = "tritonize-test-triton"
API_CONTAINER = "tritonize-test-api"
NETWORK = "tritonize-test"
KILLS = 3  # stubs killed in a row, each healed before the next
HEAL_BOUND_S = 60.0
ULIMITS = dk.with_ulimits([f"memlock={MEMLOCK}"])

pytestmark = pytest.mark.usefixtures("local_triton")


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "deploy.py"), "docker", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


@dataclass
class Deployed:
    flags: list[str]
    endpoints: Endpoints
    image: str
    client: Any  # the docker SDK's

    def container(self) -> Any:
        return self.client.containers.get(CONTAINER)

    def infer(self, texts: list[str], protocol: str = "grpc") -> dict[str, np.ndarray]:
        url = self.endpoints.grpc if protocol == "grpc" else self.endpoints.http
        with TextClient(url, NAME, protocol=protocol) as client:
            return client.infer(texts)


@pytest.fixture(scope="module")
def network(engine) -> str:
    """A user-defined bridge network (its own interface, removed at the end; no iptables rules)."""
    # The engine's name filter matches substrings: tritonize-test-compose_default is not this network.
    found = [n for n in engine.networks.list(names=[NETWORK]) if n.name == NETWORK]
    created = found[0] if found else engine.networks.create(NETWORK, driver="bridge")
    yield NETWORK
    for name in (CONTAINER, API_CONTAINER, CONTAINER + "-plain", CONTAINER + "-fused"):
        try:
            engine.containers.get(name).remove(force=True)
        except Exception:  # noqa: BLE001 - not there
            pass
    created.remove()


@pytest.fixture(scope="module")
def deployed(engine, images, network, served_repo, local_options, tmp_path_factory) -> Deployed:
    options = local_options(served_repo, tmp_path_factory.mktemp("run"))
    flags = ["--repository", str(served_repo), "--http-port", str(options.http_port),
             "--grpc-port", str(options.grpc_port), "--metrics-port", str(options.metrics_port),
             "--gpus", "none", "--base-image", images["triton"].image,
             "--network", network, "--build-network", "host", "--container-name", CONTAINER, "--timeout", "300",
             *(["--ulimit", f"memlock={MEMLOCK}"] if MEMLOCK != -1 else [])]
    start = time.perf_counter()
    up = cli("up", *flags)
    assert up.returncode == 0, up.stdout + up.stderr
    built = re.search(r"✓ building .*?\((\d+(?:\.\d+)?)s\)", up.stderr, re.S)
    image = ct.default_image()
    record("serving_image", {"image": image, "build_s": float(built.group(1)) if built else 0.0,
                             "size_mb": round(engine.images.get(image).attrs["Size"] / 1e6, 1)})
    record("up_s", round(time.perf_counter() - start, 1))
    deployed = Deployed(flags, Endpoints("127.0.0.1", options.http_port, options.grpc_port, options.metrics_port),
                        image, engine)
    yield deployed


def stub_pids(container: Any, step: str) -> list[int]:
    """Host PIDs of the step's live Python-backend stubs in the container."""
    table = container.top(ps_args="-o pid,stat,args")
    return [int(row[0]) for row in table["Processes"]
            if STUB_NAME in row[2] and f"/{step}/" in row[2] and not row[1].startswith("Z")]


def answered(deployed: Deployed) -> bool:
    try:
        return bool(deployed.infer(["still serving"]))
    except Exception:  # noqa: BLE001 - refused, reset, or the step's error
        return False


# --------------------------------------------------------------------------- serving


def test_the_healthcheck_goes_healthy(deployed) -> None:
    container = deployed.container()

    def healthy() -> bool:
        container.reload()
        return container.attrs["State"]["Health"]["Status"] == "healthy"

    wait_for(healthy, 60)
    state = container.attrs["State"]
    first = next(entry for entry in state["Health"]["Log"] if entry["ExitCode"] == 0)
    assert "answered" in first["Output"]
    record("healthy_after_start_s", round(timestamp(first["End"]) - timestamp(state["StartedAt"]), 1))


def timestamp(text: str) -> float:
    """An engine timestamp (RFC 3339, nanoseconds) as seconds."""
    from datetime import datetime

    head, _, rest = text.partition(".")
    fraction = rest.rstrip("Z").split("+")[0].split("-")[0]
    return datetime.fromisoformat(head + "+00:00").timestamp() + float(f"0.{fraction or 0}")


def test_up_answers_raw_strings_over_http_and_grpc_as_the_local_server_does(deployed, served_repo, local_options,
                                                                            tmp_path) -> None:
    container = {p: deployed.infer(TEXTS, p) for p in ("http", "grpc")}
    with LocalRuntime(local_options(served_repo, tmp_path), quiet=True, variant=PRODUCTION_VARIANT) as endpoints:
        with TextClient(endpoints.grpc, NAME, protocol="grpc") as client:
            local = client.infer(TEXTS)
    assert local and set(local) == set(container["http"]) == set(container["grpc"])
    for protocol, outputs in container.items():
        for name, value in outputs.items():
            assert_same(value, local[name], (protocol, name))
            assert value.shape[0] == len(TEXTS)
    record("sdk_vs_local_max_abs", max(max_abs(embedding(o), embedding(local)) for o in container.values()))


def model_config(deployed: Deployed, model: str) -> dict:
    # 10 s, not http_get's 2: two servers and their stubs share two cores here, one of them just warmed up.
    status, body = http_get(f"{deployed.endpoints.http}/v2/models/{model}/config", timeout=10.0)
    assert status == 200, (status, body[:200])
    return json.loads(body)


def test_each_step_serves_its_config_pbtxt_the_model_step_on_the_native_onnxruntime_backend(deployed) -> None:
    """What NVIDIA's image runs: no --model-config-name, so every step loads its config.pbtxt; the model step on
    the onnxruntime backend of /opt/tritonserver/backends/onnxruntime (no Python stub of its own), the tokenizer
    step in Python-backend stubs, the ensemble feeding one to the other."""
    container = deployed.container()
    assert not any(arg.startswith("--model-config-name") for arg in container.attrs["Config"]["Cmd"])
    model = model_config(deployed, MODEL_STEP)
    assert model["platform"] == "onnxruntime_onnx" and model["backend"] == "onnxruntime"
    assert model_config(deployed, TOKENIZER_STEP)["backend"] == "python"
    steps = [s["model_name"] for s in model_config(deployed, NAME)["ensemble_scheduling"]["step"]]
    assert steps == [TOKENIZER_STEP, MODEL_STEP, STATISTICS_STEP]  # the last counts what the graph answered
    assert stub_pids(container, TOKENIZER_STEP) and not stub_pids(container, MODEL_STEP)
    assert stub_pids(container, STATISTICS_STEP)
    log = container.logs().decode("utf-8", "replace")
    assert "TRITONBACKEND_Initialize: onnxruntime" in log
    assert "/opt/tritonserver/backends/onnxruntime/libtriton_onnxruntime.so" in log


def test_the_container_runs_as_specified(deployed) -> None:
    """Loopback only, the repository read-only, the shm size and the settings compose applies too."""
    container = deployed.container()
    attrs, host = container.attrs, container.attrs["HostConfig"]
    assert attrs["Config"]["User"] == "1000:1000"
    assert attrs["Config"]["Entrypoint"] == list(ct.entrypoint())
    assert host["NetworkMode"] == NETWORK and host["ShmSize"] == 1 << 30
    published = attrs["NetworkSettings"]["Ports"]
    for inside, outside in zip(ct.CONTAINER_PORTS.values(), (deployed.endpoints.http_port, deployed.endpoints.grpc_port,
                                                            deployed.endpoints.metrics_port)):
        assert published[f"{inside}/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": str(outside)}]
    assert host["RestartPolicy"]["Name"] == ct.RESTART_POLICY
    assert {(u["Name"], u["Soft"], u["Hard"]) for u in host["Ulimits"]} == set(ULIMITS)
    code, out = container.exec_run(["sh", "-c", "ulimit -s; ulimit -l"])
    stack, memlock = out.decode().split()
    assert int(stack) * 1024 == dict((n, s) for n, s, _ in ULIMITS)["stack"]
    assert memlock == ("unlimited" if MEMLOCK == -1 else str(MEMLOCK // 1024))
    assert host["SecurityOpt"] == list(ct.SECURITY_OPT)
    (mount,) = attrs["Mounts"]
    assert mount["Destination"] == ct.MODELS_DIR and mount["RW"] is False
    code, out = container.exec_run(["python3", "-c", "import os; s = os.statvfs('/dev/shm'); print(s.f_blocks * s.f_frsize)"])
    assert code == 0 and int(out) == 1 << 30
    code, out = container.exec_run(["touch", f"{ct.MODELS_DIR}/written"])
    assert code != 0 and b"Read-only file system" in out
    code, out = container.exec_run(["id", "-u"])
    assert code == 0 and out.strip() == b"1000"
    # On the host, every published port is bound to 127.0.0.1 only (the engine's proxy listens there; as
    # /proc/net/tcp{,6} write it: IPv4, IPv4-mapped IPv6 and ::1).
    assert_loopback_only([deployed.endpoints.http_port, deployed.endpoints.grpc_port, deployed.endpoints.metrics_port])


def test_status_and_logs(deployed) -> None:
    status = cli("status", *deployed.flags)
    assert status.returncode == 0, status.stderr
    text = status.stdout + status.stderr
    assert "running" in text and "healthy" in text and NAME in text
    logs = cli("logs", *deployed.flags, "--tail", "400")
    assert logs.returncode == 0 and "Started GRPCInferenceService" in logs.stdout + logs.stderr


# --------------------------------------------------------------------------- the API beside it


def test_the_api_container_answers_the_openai_route_over_grpc(deployed, engine, images, network, served_repo,
                                                              local_options, tmp_path) -> None:
    """docker/api.Dockerfile's image beside Triton on their network, as compose runs it: gRPC to Triton by name,
    its port published on loopback, its own healthcheck healthy, /v1/embeddings equal to the ensemble's."""
    import json
    import urllib.request

    from container.standin import build

    start = time.perf_counter()
    build(engine, ROOT, "docker/api.Dockerfile", "tritonize-api:test", None, {"PYTHON_IMAGE": images["python"].image})
    record("api_image", {"build_s": round(time.perf_counter() - start, 1),
                         "size_mb": round(engine.images.get("tritonize-api:test").attrs["Size"] / 1e6, 1)})
    port = local_options(served_repo, tmp_path).http_port
    from docker.types import Mount

    api = engine.containers.run(
        "tritonize-api:test", name=API_CONTAINER, detach=True, network=network, read_only=True,
        ports={"8080/tcp": ("127.0.0.1", port)},
        command=["tritonize", "api", "--repository", "/models", "--grpc-url", f"{CONTAINER}:8001",
                 "--host", "0.0.0.0", "--port", "8080"],
        mounts=[Mount(target="/models", source=str(served_repo), type="bind", read_only=True)],
        security_opt=list(ct.SECURITY_OPT),
    )
    try:
        wait_for(lambda: http_get(f"http://127.0.0.1:{port}/health")[0] == 200, 90, 0.5)
        assert api.attrs["Config"]["User"] == "1000:1000"
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/embeddings", method="POST", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": NAME, "input": TEXTS, "encoding_format": "float"}).encode())
        with urllib.request.urlopen(request, timeout=30) as response:
            body = json.loads(response.read())
        got = np.array([row["embedding"] for row in sorted(body["data"], key=lambda r: r["index"])])
        direct = embedding(deployed.infer(TEXTS))
        direct = direct / np.linalg.norm(direct, axis=1, keepdims=True)
        assert got.shape == direct.shape and np.abs(got - direct).max() <= API_ATOL

        def healthy() -> bool:
            api.reload()
            return api.attrs["State"]["Health"]["Status"] == "healthy"

        wait_for(healthy, 90, 0.5)
    finally:
        api.remove(force=True)


# --------------------------------------------------------------------------- a dead stub


def test_a_killed_stub_ends_the_container_and_the_restart_policy_heals_it(deployed) -> None:
    """Counted, as the local supervisor's test is: KILLS tokenizer stubs killed in a row (the production path's
    Python step), each time the ensemble answers again within HEAL_BOUND_S, the engine counts one restart more
    and the watchdog's log one line more."""
    container = deployed.container()
    reference = deployed.infer(TEXTS)
    heals = []
    for kill in range(1, KILLS + 1):
        wait_for(lambda: answered(deployed) and len(stub_pids(container, TOKENIZER_STEP)) > 0, HEAL_BOUND_S)
        victim = stub_pids(container, TOKENIZER_STEP)[0]
        os.kill(victim, signal.SIGKILL)
        start = time.monotonic()

        def restarted() -> bool:
            container.reload()
            return container.attrs["RestartCount"] >= kill

        wait_for(restarted, HEAL_BOUND_S)
        wait_for(lambda: answered(deployed), HEAL_BOUND_S - (time.monotonic() - start))
        heals.append(round(time.monotonic() - start, 1))
    container.reload()
    assert container.attrs["RestartCount"] == KILLS
    log = container.logs().decode("utf-8", "replace")
    assert log.count(RESTART_LINE) == KILLS
    assert log.count("(a dead stub)") == KILLS
    after = deployed.infer(TEXTS)
    for name, value in reference.items():
        assert_same(after[name], value, name)
    record("kill_to_answer_s", heals)


# --------------------------------------------------------------------------- the fused one step


def test_the_fused_variant_answers_as_production_from_one_python_step(deployed, engine, served_repo, local_options,
                                                                      tmp_path) -> None:
    """`--config-name local` in the same image: the flag reaches Triton, the model step is the fused Python step
    (configs/fused.pbtxt: tokenizer and onnxruntime in one model, in stubs of its own), and its answers equal the
    production container's."""
    options = local_options(served_repo, tmp_path)
    docker_options = dk.DockerOptions(image=deployed.image, gpus="none", config_name="fused", network=NETWORK,
                                      container_name=CONTAINER + "-fused", ulimits=ULIMITS)
    spec = dk.container_spec(options, docker_options)
    assert "--model-config-name=fused" in spec.command
    container = engine.containers.run(**spec.run_kwargs())
    try:
        fused = Deployed([], Endpoints("127.0.0.1", options.http_port, options.grpc_port, options.metrics_port),
                         deployed.image, engine)
        # gRPC answering is not HTTP listening yet: Triton starts its HTTP endpoint after its gRPC one.
        wait_for(lambda: answered(fused) and http_get(f"{fused.endpoints.http}/v2/health/ready")[0] == 200, 120, 0.5)
        assert model_config(fused, MODEL_STEP)["backend"] == "python"
        assert stub_pids(container, MODEL_STEP)
        production = deployed.infer(TEXTS)
        for protocol in ("http", "grpc"):
            got = fused.infer(TEXTS, protocol)
            assert set(got) == set(production)
            for name, value in got.items():
                assert_same(value, production[name], (protocol, name))
        record("fused_vs_production_max_abs", max_abs(embedding(got), embedding(production)))
    finally:
        container.remove(force=True)


# --------------------------------------------------------------------------- the default layout: no Python


def test_the_graph_layout_serves_in_the_image_with_no_python(deployed, engine, graph_repo, local_options,
                                                            tmp_path) -> None:
    """generate's default layout in the serving image, from a folder mounted where the image mounts it: the
    texts and model steps load the operator library the repository ships (by its bare name, from Triton's
    onnxruntime backend folder where the image puts it), run no Python stub at all, and answer raw strings as the
    local server does."""
    options = local_options(graph_repo, tmp_path)
    spec = dk.container_spec(options, dk.DockerOptions(image=deployed.image, gpus="none", network=NETWORK,
                                                       container_name=CONTAINER + "-graph", ulimits=ULIMITS))
    container = engine.containers.run(**spec.run_kwargs())
    try:
        graph = Deployed([], Endpoints("127.0.0.1", options.http_port, options.grpc_port, options.metrics_port),
                         deployed.image, engine)
        # Triton opens its HTTP port after its gRPC one: wait for both, as the fused variant's test does.
        wait_for(lambda: answered(graph) and http_get(f"{graph.endpoints.http}/v2/health/ready")[0] == 200, 120, 0.5)
        for step in (TOKENIZER_STEP, MODEL_STEP):
            config = model_config(graph, step)
            assert config["backend"] == "onnxruntime", config
        assert not [row for row in container.top(ps_args="-o pid,args")["Processes"] if STUB_NAME in row[1]]
        served = graph.infer(TEXTS, "grpc")
        with LocalRuntime(local_options(graph_repo, tmp_path / "local"), quiet=True) as endpoints:
            with TextClient(endpoints.grpc, NAME, protocol="grpc") as client:
                local = client.infer(TEXTS)
        assert set(served) == set(local)
        for name, value in served.items():
            assert_same(value, local[name], name)
        record("graph_layout_vs_local_max_abs", max_abs(embedding(served), embedding(local)))
    finally:
        container.remove(force=True)


def test_down_answers_all_16_requests_in_flight(deployed) -> None:
    results: list[Any] = [None] * 16
    started = threading.Barrier(17)

    def one(i: int) -> None:
        started.wait()
        try:
            results[i] = deployed.infer([LONG] * 8, "http")
        except Exception as exc:  # noqa: BLE001 - reported below
            results[i] = exc

    with ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(one, i) for i in range(16)]
        started.wait()
        time.sleep(0.3)
        start = time.monotonic()
        down = cli("down", *deployed.flags)
        down_s = time.monotonic() - start
        for future in futures:
            future.result()
    assert down.returncode == 0, down.stderr
    failed = [r for r in results if not isinstance(r, dict)]
    assert not failed, failed[:3]
    assert all(embedding(r).shape[0] == 8 for r in results)
    drained = re.search(r"drained in (\d+\.\d)s", down.stderr)
    record("down", {"in_flight": 16, "answered": 16 - len(failed), "down_s": round(down_s, 1),
                    "drain_s": float(drained.group(1)) if drained else None})
    from docker.errors import NotFound

    with pytest.raises(NotFound):
        deployed.container()


# --------------------------------------------------------------------------- without the watchdog


def test_without_the_watchdog_a_dead_stub_leaves_an_unhealthy_container_running(deployed, engine, served_repo,
                                                                               local_options, tmp_path) -> None:
    """What the HEALTHCHECK alone does: reports `unhealthy`, and nothing restarts (Docker restarts a container
    only when its process exits). Both stubs of the tokenizer step are killed, so that every request fails."""
    options = local_options(served_repo, tmp_path)
    docker_options = dk.DockerOptions(image=deployed.image, gpus="none", network=NETWORK,
                                      container_name=CONTAINER + "-plain")
    spec = dk.container_spec(options, replace(docker_options, ulimits=ULIMITS))
    kwargs = spec.run_kwargs()
    kwargs["entrypoint"] = [spec.command[0]]  # Triton itself, no watchdog
    kwargs["command"] = list(spec.command[1:])
    kwargs["healthcheck"] = {**kwargs["healthcheck"], "interval": 2 * 10**9, "start_period": 10**9}
    container = engine.containers.run(**kwargs)
    try:
        endpoints = Endpoints("127.0.0.1", options.http_port, options.grpc_port, options.metrics_port)
        plain = Deployed([], endpoints, deployed.image, engine)
        wait_for(lambda: answered(plain), 120, 0.5)
        victims = stub_pids(container, TOKENIZER_STEP)
        assert victims
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        start = time.monotonic()

        def unhealthy() -> bool:
            container.reload()
            return container.attrs["State"]["Health"]["Status"] == "unhealthy"

        try:
            wait_for(unhealthy, 60, 0.5)
        except AssertionError:
            raise AssertionError(f"{container.attrs['State']}\n{container.top(ps_args='-o pid,stat,args')}") from None
        record("unhealthy_after_kill_s", round(time.monotonic() - start, 1))
        time.sleep(10)
        container.reload()
        assert container.status == "running" and container.attrs["RestartCount"] == 0
        assert http_get(f"{endpoints.http}/v2/health/ready")[0] == 200  # Triton still says ready
        assert not answered(plain)
    finally:
        container.remove(force=True)
