"""The container path, tested without a Docker engine (none runs here).

What is checked, and how:
- docker-compose.yml against the official Compose Specification schema
  (tests/data/compose-spec.json) with jsonschema, raw and after `${VAR:-default}`
  interpolation; deliberately broken copies must fail the same validator;
- the `monitoring` profile (Prometheus, Grafana): its own profile, loopback
  binds, pinned images, a scrape target that either Triton service answers,
  admin APIs off, Grafana read-only with no admin account;
- the container spec that `deploy.py docker up` launches, as data, and through
  the docker SDK's own conversion of `containers.run` kwargs to the engine's
  create-container request;
- the rendered serving Dockerfile, and that the committed copy has not drifted;
- the error path when no engine can be reached: a real connection attempt to a
  socket that does not exist, and the CLI's one-line error.
Nothing here fakes an engine; running the container needs one (docs/container.md).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from support import REPO_ROOT as ROOT
from tritonize.errors import TritonizeError
from tritonize.runtime import container as ct
from tritonize.runtime import docker as dk
from tritonize.runtime import machine
from tritonize.runtime.base import ServerOptions
from tritonize.serving import SERVING_DIR
from tritonize.spec import TENSORRT_CACHE

COMPOSE = ROOT / "docker-compose.yml"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"
DOCKERFILE = ROOT / "docker" / "Dockerfile"


# --------------------------------------------------------------------------- helpers

_VAR = re.compile(
    r"\$(?:(?P<escaped>\$)|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>(?:[^}$]|\$\{[^}]*\}|\$)*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation (`$VAR`, `${VAR}`, `${VAR:-d}`, `${VAR-d}`, `${VAR:?e}`, `$$`), a default
    that names another variable included (`${A:-x${B:-y}}`, one level, as compose v2 resolves it)."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("name") or m.group("bare")
        op, arg, val = m.group("op"), interpolate(m.group("arg") or "", env), env.get(name)
        if op == ":-":
            return val if val else arg
        if op == "-":
            return val if val is not None else arg
        if op in (":?", "?"):
            if (op == ":?" and not val) or val is None:
                raise ValueError(f"required variable {name}: {arg}")
            return val
        if op == ":+":
            return arg if val else ""
        if op == "+":
            return arg if val is not None else ""
        return val or ""

    return _VAR.sub(sub, value)


def load_compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.Draft202012Validator(schema)


def schema_errors(doc: Any) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator().iter_errors(doc)]


def default_compose() -> dict[str, Any]:
    """The compose model as `docker compose` sees it with no variables set."""
    return interpolate(load_compose(), env={})


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A minimal generated-looking repository (require_repository wants a model dir)."""
    model = tmp_path / "triton_repo" / "minilm"
    model.mkdir(parents=True)
    (model / "config.pbtxt").write_text('platform: "ensemble"\n')
    return tmp_path / "triton_repo"


@pytest.fixture()
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the docker SDK at a socket path that does not exist."""
    address = f"unix://{tmp_path}/no-such-dir/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", address)
    for var in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT"):
        monkeypatch.delenv(var, raising=False)
    return address


# --------------------------------------------------------------------------- compose: schema


def test_vendored_schema_is_the_documented_copy() -> None:
    digest = hashlib.sha256(SCHEMA.read_bytes()).hexdigest()
    assert digest in (ROOT / "tests" / "data" / "README.md").read_text()
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == "Compose Specification"


def test_compose_file_is_valid_as_written() -> None:
    assert schema_errors(load_compose()) == []


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"TRITON_REPO": "/srv/models/minilm", "TRITON_BIND": "0.0.0.0", "TRITON_RELEASE": "25.12"},
        {"TRITON_HTTP_PORT": "9000", "TRITON_SHM_SIZE": "2gb", "TRITON_LOG_VERBOSE": "1"},
    ],
)
def test_compose_file_is_valid_after_interpolation(env: dict[str, str]) -> None:
    doc = interpolate(load_compose(), env)
    assert "$" not in json.dumps(doc), "every variable has a default"
    assert schema_errors(doc) == []


def _set(doc: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is _DELETE:
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("services.triton.shm-size", "1g"),  # misspelt key
        ("services.triton.ports", "8000:8000"),  # not a list
        ("services.triton.restart", ["always"]),  # not a string
        ("services.triton.healthcheck.start-period", "300s"),  # unknown healthcheck key
        ("services.triton.deploy.resources.reservations.devices.0.capabilities", _DELETE),  # required
        ("services.triton.volumes.0.read_only", ["yes"]),  # wrong type
        ("services.triton.ulimits.memlock", {"soft": -1}),  # hard is required
        ("servics", {}),  # unknown top-level key
    ],
)
def test_broken_compose_fails_the_schema(path: str, value: Any) -> None:
    broken = copy.deepcopy(default_compose())
    _set(broken, path, value)
    assert schema_errors(broken), f"{path} = {value!r} should not validate"


# --------------------------------------------------------------------------- compose: meaning


def test_compose_serves_the_repository_with_gpus_on_loopback() -> None:
    triton = default_compose()["services"]["triton"]
    # Triton's own HTTP port is not published, and binds the container's loopback: its routes are the API's.
    assert triton["ports"] == ["127.0.0.1:8001:8001", "127.0.0.1:8002:8002"]
    assert "--http-address=127.0.0.1" in triton["command"]
    assert triton["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
    ]
    volume, cache = triton["volumes"]
    assert volume == {
        "type": "bind",
        "source": "./triton_repo",
        "target": "/models",
        "read_only": True,
        "bind": {"create_host_path": False},
    }
    # TensorRT's engine cache, where the configs' trt_engine_cache_path points: a named volume, kept across
    # restarts and `down` / `up` (tests/container/test_docker_compose.py writes and finds it on a real engine).
    assert cache == {"type": "volume", "source": ct.TRT_CACHE_VOLUME, "target": TENSORRT_CACHE}
    assert ct.TRT_CACHE_VOLUME in default_compose()["volumes"]
    assert triton["shm_size"] == ct.DEFAULT_SHM_SIZE
    assert triton["restart"] == "unless-stopped"
    assert triton["pull_policy"] == "build"
    assert triton["build"]["context"] == "./docker"
    assert (COMPOSE.parent / triton["build"]["context"] / "Dockerfile").is_file()


def test_compose_api_fronts_the_triton_service_over_grpc() -> None:
    """The API container: built from docker/api.Dockerfile, gRPC to the Triton service's network alias, the
    same repository read-only, its port on loopback, healthy only when /health's real inference answers."""
    services = default_compose()["services"]
    api = services["api"]
    assert "profiles" not in api  # beside `triton` (GPU) or `triton-cpu`, whichever runs
    assert (COMPOSE.parent / api["build"]["context"] / api["build"]["dockerfile"]).is_file()
    command = api["command"]
    assert command[:2] == ["tritonize", "api"] and command[command.index("--grpc-url") + 1] == "tritonserver:8001"
    assert "tritonserver" in services["triton"]["networks"]["default"]["aliases"]
    # The API's port, and Triton's HTTP port number for Triton's clients, both to the API (its front for /v2).
    assert api["ports"] == ["127.0.0.1:8080:8080", "127.0.0.1:8000:8080"]
    assert api["volumes"] == services["triton"]["volumes"][:1] and api["volumes"][0]["read_only"] is True
    assert api["read_only"] is True and api["restart"] == "unless-stopped"
    assert "http://127.0.0.1:8080/health" in " ".join(api["healthcheck"]["test"])
    assert api["environment"]["TRITONIZE_API_KEY"] == ""  # no key unless the environment sets one
    dockerfile = (COMPOSE.parent / api["build"]["context"] / api["build"]["dockerfile"]).read_text()
    assert "--require-hashes -r /tmp/api-image.lock" in dockerfile and "USER 1000:1000" in dockerfile
    assert json.loads(dockerfile.split("CMD ", 2)[-1].strip()) == command


def test_compose_healthcheck_runs_a_real_inference() -> None:
    check = default_compose()["services"]["triton"]["healthcheck"]
    assert check["test"][0] == "CMD"
    assert check["test"][1:] == list(ct.HEALTHCHECK["test"])
    # The image's health script, on the repository's health.json: not /v2/health/ready, which stays 200
    # after a stub has died.
    assert check["test"][1:3] == ["python3", ct.HEALTH_SCRIPT]
    assert "/models/health.json" in check["test"]
    for key in ("interval", "timeout", "start_period", "retries"):
        assert str(check[key]) == str(ct.HEALTHCHECK[key])


def test_the_image_carries_the_served_scripts_byte_for_byte() -> None:
    """health.py, and the entrypoint (watchdog.py) with the /proc reader it imports (procfs.py)."""
    import base64

    lines = [line for line in DOCKERFILE.read_text().splitlines() if "base64 -d" in line]
    assert len(lines) == len(ct.IMAGE_SCRIPTS)
    for name, line in zip(ct.IMAGE_SCRIPTS, lines):
        encoded = line.split("'")[1]
        assert base64.b64decode(encoded) == (SERVING_DIR / name).read_bytes()
        assert f"> {ct.SCRIPTS_DIR}/{name}" in line
    assert f"{ct.SCRIPTS_DIR}/health.py" == ct.HEALTH_SCRIPT and f"{ct.SCRIPTS_DIR}/watchdog.py" == ct.WATCHDOG_SCRIPT


def test_an_image_with_other_scripts_is_rebuilt() -> None:
    """The image's label carries its scripts' digest, which `up` compares before reusing an image: one built
    with a health script that reads a single check must not probe a repository of several models."""
    digest = hashlib.sha256()
    for name in ct.IMAGE_SCRIPTS:
        digest.update((SERVING_DIR / name).read_bytes())
    assert ct.health_digest() == digest.hexdigest()
    assert f'{ct.LABEL_PREFIX}.health-sha256="{digest.hexdigest()}"' in DOCKERFILE.read_text()


def test_the_image_runs_triton_under_the_watchdog() -> None:
    """ENTRYPOINT is the watchdog and CMD Triton's command, so compose's and the SDK's `command` replace CMD only;
    the watchdog's settings are the module's."""
    lines = _instructions(ct.render_dockerfile())
    entrypoint = json.loads(next(line for line in lines if line.startswith("ENTRYPOINT "))[len("ENTRYPOINT "):])
    assert entrypoint == list(ct.entrypoint()) and entrypoint[:2] == ["python3", ct.WATCHDOG_SCRIPT]
    assert entrypoint[-1] == "--" and f"--file={ct.MODELS_DIR}/health.json" in entrypoint
    for key, value in ct.WATCHDOG.items():
        assert f"--{key.replace('_', '-')}={value}" in entrypoint


def test_compose_is_rendered_from_the_settings() -> None:
    """One place for the container's settings: docker-compose.yml is rendered from the module `deploy.py docker`
    reads (ports, shm size, ulimits, healthcheck, stop grace, restart policy)."""
    assert COMPOSE.read_text() == ct.render_compose(), (
        "docker-compose.yml drifted from templates/docker/docker-compose.yml.j2 and tritonize/runtime/container.py: "
        "python -m tritonize.runtime.docker compose > docker-compose.yml"
    )
    triton = default_compose()["services"]["triton"]
    assert triton["stop_grace_period"] == f"{ct.STOP_GRACE_S}s" and triton["restart"] == ct.RESTART_POLICY
    assert triton["ports"] == [f"127.0.0.1:{port}:{port}" for kind, port in ct.CONTAINER_PORTS.items() if kind != "http"]


def test_compose_command_is_the_container_command() -> None:
    command = default_compose()["services"]["triton"]["command"]
    assert command == list(ct.triton_command(ServerOptions()))
    assert "--model-control-mode=none" in command
    assert "--model-repository=/models" in command
    assert not any(arg.startswith("--model-config-name") for arg in command)


def test_compose_settings_match_the_sdk_launcher() -> None:
    triton = default_compose()["services"]["triton"]
    assert triton["ulimits"] == {name: soft for name, soft, _ in ct.ULIMITS}
    assert triton["security_opt"] == list(ct.SECURITY_OPT)
    assert triton["environment"] == ct.ENVIRONMENT
    assert triton["image"] == ct.default_image()


def test_compose_cpu_variant_is_the_same_server_without_the_reservation() -> None:
    services = default_compose()["services"]
    gpu, cpu = services["triton"], services["triton-cpu"]
    assert "deploy" not in cpu
    assert cpu["profiles"] == ["cpu"]  # not started by a plain `docker compose up`
    assert "profiles" not in gpu
    rest = {k: v for k, v in gpu.items() if k != "deploy"}
    assert {k: v for k, v in cpu.items() if k != "profiles"} == rest


def test_compose_release_is_the_one_setting() -> None:
    raw = load_compose()["x-triton"]
    defaults = {
        re.fullmatch(r"\$\{TRITON_RELEASE:-([0-9.]+)\}", raw["build"]["args"]["TRITON_RELEASE"]).group(1),
        re.search(r"\$\{TRITON_RELEASE:-([0-9.]+)\}", raw["image"]).group(1),
    }
    assert defaults == {ct.DEFAULT_TRITON_RELEASE}
    assert ct.release_is_patched(ct.DEFAULT_TRITON_RELEASE)
    # The floor: the first release with all of the 2025 fixes.
    assert ct.release_key(ct.MIN_TRITON_RELEASE) >= (25, 8)


def test_compose_points_at_another_repository_and_address() -> None:
    env = {"TRITON_REPO": "/srv/models/minilm", "TRITON_BIND": "0.0.0.0", "TRITON_HTTP_PORT": "9000"}
    services = interpolate(load_compose(), env)["services"]
    assert services["triton"]["volumes"][0]["source"] == "/srv/models/minilm"
    # Published everywhere, Triton's HTTP port number still reaches only the API's front, never Triton's own port.
    assert services["triton"]["ports"] == ["0.0.0.0:8001:8001", "0.0.0.0:8002:8002"]
    assert services["api"]["ports"] == ["0.0.0.0:8080:8080", "0.0.0.0:9000:8080"]


@pytest.mark.parametrize(
    ("release", "patched"), [("24.10", False), ("25.07", False), ("25.08", True), ("25.10", True), ("26.01", True)]
)
def test_release_floor(release: str, patched: bool) -> None:
    assert ct.release_is_patched(release) is patched


def test_release_must_look_like_a_release() -> None:
    with pytest.raises(TritonizeError):
        ct.release_key("latest")


# --------------------------------------------------------------------------- Dockerfile


def _instructions(text: str) -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_committed_dockerfile_is_the_rendering() -> None:
    assert DOCKERFILE.read_text() == ct.render_dockerfile(), (
        "docker/Dockerfile drifted from templates/docker/Dockerfile.j2: "
        "python -m tritonize.runtime.docker > docker/Dockerfile"
    )


def test_dockerfile_builds_on_the_default_release() -> None:
    lines = _instructions(ct.render_dockerfile())
    arg = next(line for line in lines if line.startswith("ARG TRITON_RELEASE="))
    release = arg.split("=", 1)[1]
    assert release == ct.DEFAULT_TRITON_RELEASE
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM ${BASE_IMAGE}"]
    base = next(line for line in lines if line.startswith("ARG BASE_IMAGE="))
    assert base.replace("${TRITON_RELEASE}", release) == f"ARG BASE_IMAGE=nvcr.io/nvidia/tritonserver:{release}-py3"
    assert lines.index(base) < lines.index(froms[0])  # a build argument of FROM: the stand-in replaces it in tests


def test_dockerfile_adds_only_pinned_tokenizers_and_pillow() -> None:
    text = ct.render_dockerfile()
    lines = _instructions(text)
    runs = [line for line in lines if line.startswith("RUN ")]
    # Two: the pinned packages, and the health script written from its base64.
    assert len(runs) == 2 and sum("base64 -d" in r for r in runs) == 1
    (run,) = [r for r in runs if "base64 -d" not in r]
    requirements = re.findall(r"'([^']*)'", run.split(" > /tmp/requirements.txt")[0])[1:]  # after printf's format
    pins = ct.image_pins()
    assert [r.split()[0] for r in requirements] == [p.requirement for p in pins]
    assert [p.name for p in pins] == ["pillow", "tokenizers"]  # Pillow: the image-text step decodes images
    for requirement, pin in zip(requirements, pins):
        assert sorted(requirement.split()[1:]) == sorted(f"--hash=sha256:{h}" for h in pin.hashes)
    for flag in ("--no-deps", "--require-hashes", "--only-binary=:all:", "--no-cache-dir"):
        assert flag in run
    assert run.count("pip install") == 1
    # `up` rebuilds an image whose label shows another pin.
    assert f'{ct.LABEL_PREFIX}.pins="{ct.pins_label(pins)}"' in text and "pillow==" in ct.pins_label(pins)
    body = "\n".join(line for line in lines if "base64 -d" not in line).lower()
    for heavy in ("torch", "transformers", "onnxruntime", "apt-get", "tensorflow"):
        assert heavy not in body


def test_dockerfile_runs_unprivileged_with_health_and_command() -> None:
    lines = _instructions(ct.render_dockerfile())
    users = [line for line in lines if line.startswith("USER ")]
    assert users[-1] == "USER 1000:1000"
    health = next(line for line in lines if line.startswith("HEALTHCHECK "))
    assert " ".join(ct.HEALTHCHECK["test"]) in health
    cmd = next(line for line in lines if line.startswith("CMD ["))
    assert json.loads(cmd[len("CMD ") :]) == list(ct.triton_command(ServerOptions()))


def test_dockerfile_release_is_a_parameter() -> None:
    assert "ARG TRITON_RELEASE=25.12" in ct.render_dockerfile("25.12")
    with pytest.raises(TritonizeError):
        ct.render_dockerfile("25.12; rm -rf /")


def test_tokenizers_pin_is_the_generators() -> None:
    """tokenizer.json is written by this environment's tokenizers: the image carries the same release, hash-pinned."""
    import tokenizers

    (pin,) = [p for p in ct.image_pins() if p.name == "tokenizers"]
    assert pin.requirement == f"tokenizers=={tokenizers.__version__}"
    assert len(pin.hashes) >= 2 and all(re.fullmatch(r"[0-9a-f]{64}", h) for h in pin.hashes)


# --------------------------------------------------------------------------- container spec


def test_host_network_spec_binds_triton_itself(repo: Path) -> None:
    """Under host networking nothing is published: Triton binds the requested address and ports itself, and
    the healthcheck probes that port."""
    options = ServerOptions(repository=repo, http_port=9100, grpc_port=9101, metrics_port=9102)
    spec = dk.container_spec(options, dk.DockerOptions(network="host", config_name="local", gpus="none"))
    kwargs = spec.run_kwargs()
    assert kwargs["network_mode"] == "host" and "ports" not in kwargs
    command = kwargs["command"]
    for flag in ("--http-port=9100", "--grpc-port=9101", "--metrics-port=9102", "--model-config-name=local",
                 "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"):
        assert flag in command
    assert kwargs["healthcheck"]["test"] == ["CMD", *ct.health_command(9100)]
    assert "http://127.0.0.1:9100" in kwargs["healthcheck"]["test"]
    # Bound everywhere, the host's network still reaches Triton's HTTP port only on loopback.
    everywhere = dk.container_spec(ServerOptions(repository=repo, host="0.0.0.0"), dk.DockerOptions(network="host")).command
    assert "--grpc-address=0.0.0.0" in everywhere and "--http-address=127.0.0.1" in everywhere
    assert "--http-address=0.0.0.0" not in everywhere
    assert kwargs["healthcheck"]["interval"] == ct.duration_s(ct.HEALTHCHECK["interval"]) * 10**9


def test_default_spec(repo: Path) -> None:
    kwargs = dk.container_spec(ServerOptions(repository=repo), dk.DockerOptions()).run_kwargs()
    assert kwargs["image"] == f"tritonize-tritonserver:{ct.DEFAULT_TRITON_RELEASE}-py3"
    assert kwargs["detach"] is True
    assert kwargs["name"] == "tritonize-triton"
    (mount,) = kwargs["mounts"]
    assert dict(mount) == {"Target": "/models", "Source": str(repo.resolve()), "Type": "bind", "ReadOnly": True}
    assert Path(mount["Source"]).is_absolute()
    assert "volumes" not in kwargs
    assert kwargs["ports"] == {
        "8000/tcp": ("127.0.0.1", 8000),
        "8001/tcp": ("127.0.0.1", 8001),
        "8002/tcp": ("127.0.0.1", 8002),
    }
    (request,) = kwargs["device_requests"]
    assert request["Count"] == -1 and request["Capabilities"] == [["gpu"]]
    assert kwargs["shm_size"] == "1g"
    assert kwargs["restart_policy"] == {"Name": "unless-stopped"}
    assert kwargs["labels"]["ai.tritonize.repository"] == str(repo.resolve())
    command = kwargs["command"]
    assert command[0] == "tritonserver"
    assert "--model-repository=/models" in command
    assert "--model-control-mode=none" in command
    assert not any(arg.startswith("--model-config-name") for arg in command)


def test_relative_repository_becomes_absolute(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(repo.parent)
    spec = dk.container_spec(ServerOptions(repository=Path("triton_repo")), dk.DockerOptions())
    assert spec.repository == repo.resolve()


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        ("all", {"Count": -1, "DeviceIDs": []}),
        ("2", {"Count": 2, "DeviceIDs": []}),
        ("device=0,1", {"Count": 0, "DeviceIDs": ["0", "1"]}),
        ("none", None),
        ("0", None),
    ],
)
def test_gpu_requests(repo: Path, gpus: str, expected: dict[str, Any] | None) -> None:
    kwargs = dk.container_spec(ServerOptions(repository=repo), dk.DockerOptions(gpus=gpus)).run_kwargs()
    if expected is None:
        assert "device_requests" not in kwargs
    else:
        (request,) = kwargs["device_requests"]
        assert {k: request[k] for k in expected} == expected
        assert request["Capabilities"] == [["gpu"]]


@pytest.mark.parametrize("bad", ["some", "-3", "device=", "1.5"])
def test_bad_gpu_values_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        dk.parse_gpus(bad)


def test_ports_follow_the_host_option(repo: Path) -> None:
    options = ServerOptions(repository=repo, host="0.0.0.0", http_port=9000, grpc_port=9001, metrics_port=9002)
    spec = dk.container_spec(options, dk.DockerOptions())
    # Triton's own HTTP port stays on this machine's loopback whatever --host says (docs/reliability.md).
    assert spec.ports == {"8000/tcp": ("127.0.0.1", 9000), "8001/tcp": ("0.0.0.0", 9001), "8002/tcp": ("0.0.0.0", 9002)}
    assert not any(a.startswith("--http-address") for a in spec.command)  # published on the host's loopback only
    local = dk.container_spec(ServerOptions(repository=repo, host="localhost"), dk.DockerOptions())
    assert {host for host, _ in local.ports.values()} == {"127.0.0.1"}
    assert dk.reach_address("0.0.0.0") == "127.0.0.1"


def test_explicit_model_control_still_loads_the_repository(repo: Path) -> None:
    spec = dk.container_spec(ServerOptions(repository=repo, model_control="explicit"), dk.DockerOptions())
    assert "--model-control-mode=explicit" in spec.command
    assert "--load-model=*" in spec.command


def test_the_sdk_accepts_the_run_kwargs(repo: Path) -> None:
    """docker's own `containers.run` -> create-container conversion, as `run` does it (no engine call)."""
    from docker.models.containers import _create_container_args

    for gpus in ("all", "none"):
        kwargs = dk.container_spec(ServerOptions(repository=repo), dk.DockerOptions(gpus=gpus)).run_kwargs()
        kwargs.pop("detach")  # consumed by run() itself
        created = _create_container_args({**kwargs, "version": "1.43"})
        host = created["host_config"]
        assert host["ShmSize"] == 1 << 30
        assert host["Mounts"][0]["ReadOnly"] is True
        assert host["PortBindings"]["8000/tcp"] == [{"HostIp": "127.0.0.1", "HostPort": "8000"}]
        assert host["RestartPolicy"] == {"Name": "unless-stopped"}
        assert ("DeviceRequests" in host) is (gpus == "all")
        assert created["command"] == kwargs["command"]


def _parse(argv: list[str]) -> argparse.Namespace:
    from tritonize.runtime.cli import add_common_arguments

    parser = argparse.ArgumentParser()
    parser.add_argument("action")
    add_common_arguments(parser)
    dk.add_arguments(parser)
    return parser.parse_args(argv)


def test_variant_chooses_the_configs_and_config_name_is_its_deprecated_spelling(repo: Path) -> None:
    """One flag for the variant on every runtime: the container serves production unless told."""
    from tritonize.runtime.cli import options_from_args

    def named(*flags: str) -> list[str]:
        args = _parse(["up", "-r", str(repo), "--gpus", "none", *flags])
        command = dk.from_args(options_from_args(args), args).spec().command
        return [a for a in command if a.startswith("--model-config-name")]

    assert named() == [] and named("--variant", "production") == []
    assert named("--variant", "fused") == ["--model-config-name=fused"]
    assert named("--config-name", "fused") == named("--variant", "fused")
    assert named("--config-name", "local") == ["--model-config-name=local"]  # as given, as before
    with pytest.raises(SystemExit):  # both at once: argparse refuses, one line
        _parse(["up", "--variant", "fused", "--config-name", "fused"])


def test_the_local_runtime_reads_config_name_as_the_variant_it_names() -> None:
    from tritonize.runtime.cli import add_common_arguments
    from tritonize.runtime.local import cli as local_cli
    from tritonize.spec import DEFAULT_VARIANT

    parser = argparse.ArgumentParser()
    add_common_arguments(parser)
    local_cli.add_arguments(parser)
    variant = lambda *flags: local_cli.variant_from_args(parser.parse_args(list(flags)))  # noqa: E731
    assert variant() == DEFAULT_VARIANT
    assert variant("--variant", "production") == "production"
    assert variant("--config-name", "fused") == variant("--config-name", "local") == "fused"
    with pytest.raises(TritonizeError, match="--config-name container: the local server serves the variants"):
        variant("--config-name", "container")


def test_cli_flags_reach_the_spec(repo: Path) -> None:
    from tritonize.runtime.cli import options_from_args

    args = _parse(
        ["up", "-r", str(repo), "--gpus", "none", "--release", "25.12", "--shm-size", "2g", "--container-name", "t2"]
    )
    runtime = dk.from_args(options_from_args(args), args)
    assert isinstance(runtime, dk.DockerRuntime)
    spec = runtime.spec()
    assert spec.gpus is None
    assert spec.image == "tritonize-tritonserver:25.12-py3"
    assert spec.shm_size == "2g"
    assert spec.name == "t2"


def test_cli_refuses_build_and_pull_together() -> None:
    with pytest.raises(SystemExit):
        _parse(["up", "--build", "--pull"])
    with pytest.raises(SystemExit):
        _parse(["up", "--gpus", "lots"])


# --------------------------------------------------------------------------- no engine


def test_up_without_an_engine_points_to_local(repo: Path, no_engine: str) -> None:
    runtime = dk.DockerRuntime(ServerOptions(repository=repo), dk.DockerOptions())
    with pytest.raises(TritonizeError) as info:
        runtime.up()
    assert info.value.message.startswith("no Docker engine could be reached")
    assert no_engine in info.value.message
    assert "deploy.py local up" in (info.value.hint or "")


@pytest.mark.parametrize("action", ["status", "logs", "down"])
def test_other_actions_without_an_engine(repo: Path, no_engine: str, action: str) -> None:
    runtime = dk.DockerRuntime(ServerOptions(repository=repo), dk.DockerOptions())
    with pytest.raises(TritonizeError, match="no Docker engine"):
        getattr(runtime, action)()


def test_pull_needs_an_explicit_image(repo: Path, no_engine: str) -> None:
    runtime = dk.DockerRuntime(ServerOptions(repository=repo), dk.DockerOptions(pull=True))
    with pytest.raises(TritonizeError, match="--pull needs --image"):
        runtime.up()


def test_up_checks_the_repository_first(tmp_path: Path, no_engine: str) -> None:
    runtime = dk.DockerRuntime(ServerOptions(repository=tmp_path / "missing"), dk.DockerOptions())
    with pytest.raises(TritonizeError, match="no model repository"):
        runtime.up()


def _cli_env(no_engine: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKER_")}
    env["DOCKER_HOST"] = no_engine
    env.pop("TRITONIZE_DEBUG", None)
    return env


def test_cli_status_without_an_engine_is_one_clear_error(no_engine: str) -> None:
    result = subprocess.run(
        [sys.executable, "deploy.py", "docker", "status"],
        cwd=ROOT,
        env=_cli_env(no_engine),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error: no Docker engine could be reached")
    assert lines[1] == "hint: run Triton without Docker: python deploy.py local up"
    assert len(lines) == 2


def test_importing_the_runtime_does_not_import_the_sdk() -> None:
    code = "import sys, tritonize.runtime.docker; print('docker' in sys.modules, 'jinja2' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.split() == ["False", "False"], result.stderr


# --------------------------------------------------------------------------- output parsing (plain data)


def test_build_stream_errors_become_one_line() -> None:
    stream = [{"stream": "Step 1/9 : ARG TRITON_RELEASE=25.10\n"}, {"error": "pull access denied\nfor nvcr.io"}]
    with dk._Progress("building") as progress, pytest.raises(TritonizeError, match="image build failed: for nvcr.io"):
        dk._follow(stream, progress, "image build")


def test_error_lines_pick_triton_and_python_errors() -> None:
    log = "\n".join(
        [
            "I0101 00:00:00.000 1 server.cc:1] loading: minilm_model:1",
            "E0101 00:00:01.000 1 model_lifecycle.cc:2] failed to load 'minilm_tokenizer'",
            "ModuleNotFoundError: No module named 'tokenizers'",
            "I0101 00:00:02.000 1 server.cc:3] shutting down",
        ]
    )
    assert machine.error_lines(log) == log.splitlines()[1:3]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("Error while fetching server API version: ('Connection aborted.', FileNotFoundError(2, 'x'))", "no socket there"),
        ("Error while fetching server API version: ('Connection aborted.', PermissionError(13, 'x'))", "permission denied"),
        ("HTTPConnectionPool: Max retries exceeded (Connection refused)", "connection refused"),
    ],
)
def test_no_engine_reasons_are_short(text: str, reason: str) -> None:
    error = dk.no_engine_error(RuntimeError(text))
    assert error.message.endswith(f"({reason})")
    assert "deploy.py local up" in (error.hint or "")


# --------------------------------------------------------------------------- compose: the monitoring profile

MONITORING = ("prometheus", "grafana")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("services.prometheus.profiles", "monitoring"),  # not a list
        ("services.grafana.depends_on", "prometheus"),  # not a list or a map
        ("services.grafana.environment", "GF_AUTH_ANONYMOUS_ENABLED=true"),  # not a list or a map
        ("services.prometheus.volumes.1.source", ["prometheus-data"]),  # wrong type
        ("volumes.prometheus-data", ["local"]),  # not a volume definition
    ],
)
def test_broken_monitoring_services_fail_the_schema(path: str, value: Any) -> None:
    broken = copy.deepcopy(default_compose())
    _set(broken, path, value)
    assert schema_errors(broken), f"{path} = {value!r} should not validate"


def test_monitoring_runs_only_in_its_profile_on_loopback() -> None:
    services = default_compose()["services"]
    for name in MONITORING:
        assert services[name]["profiles"] == ["monitoring"]  # a plain `docker compose up` starts Triton alone
        assert services[name]["security_opt"] == list(ct.SECURITY_OPT)
    assert services["prometheus"]["ports"] == ["127.0.0.1:9090:9090"]
    assert services["grafana"]["ports"] == ["127.0.0.1:3000:3000"]
    assert services["grafana"]["depends_on"] == ["prometheus"]
    moved = interpolate(load_compose(), {"TRITON_BIND": "10.0.0.5", "GRAFANA_PORT": "3300"})["services"]
    assert moved["grafana"]["ports"] == ["10.0.0.5:3300:3000"]


def test_monitoring_images_are_pinned_releases() -> None:
    services = default_compose()["services"]
    assert services["prometheus"]["image"].startswith("prom/prometheus:")
    assert services["grafana"]["image"].startswith("grafana/grafana:")
    for name in MONITORING:
        tag = services[name]["image"].rsplit(":", 1)[1]
        assert re.fullmatch(r"v?\d+\.\d+\.\d+", tag), f"{name}: pin a release, not {tag!r}"


def test_prometheus_scrapes_whichever_triton_service_runs() -> None:
    from tritonize.runtime import monitoring

    services = default_compose()["services"]
    prometheus = services["prometheus"]
    # One read-only folder: the configuration, and the rules it names relative to itself.
    (folder,) = [v for v in prometheus["volumes"] if v["type"] == "bind"]
    assert folder["read_only"] is True and folder["bind"] == {"create_host_path": False}
    assert COMPOSE.parent / folder["source"] == COMPOSE.parent / monitoring.COMPOSE_DIR
    assert f"--config.file={folder['target']}/{monitoring.COMPOSE_CONFIG.name}" in prometheus["command"]
    config = yaml.safe_load((COMPOSE.parent / monitoring.COMPOSE_CONFIG).read_text())
    assert config["rule_files"] == [monitoring.COMPOSE_RULES.name]
    assert (COMPOSE.parent / monitoring.COMPOSE_RULES).is_file()
    job, api_job = config["scrape_configs"]
    (target,) = job["static_configs"][0]["targets"]
    # The API service's own /metrics, on its compose port.
    assert api_job["static_configs"][0]["targets"] == ["api:8080"] and "api" in services
    host, port = target.split(":")
    for name in ("triton", "triton-cpu"):
        assert host in services[name]["networks"]["default"]["aliases"], name
        assert f"--metrics-port={port}" in services[name]["command"]


def test_prometheus_keeps_its_lifecycle_and_admin_apis_off() -> None:
    prometheus = default_compose()["services"]["prometheus"]
    assert not [a for a in prometheus["command"] if a.startswith(("--web.enable-lifecycle", "--web.enable-admin-api"))]
    (data,) = [v for v in prometheus["volumes"] if v["type"] == "volume"]
    assert data["source"] in default_compose()["volumes"]
    assert f"--storage.tsdb.path={data['target']}" in prometheus["command"]


def test_grafana_shows_the_dashboard_read_only_with_no_admin_account() -> None:
    grafana = default_compose()["services"]["grafana"]
    env = grafana["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert env["GF_SECURITY_DISABLE_INITIAL_ADMIN_CREATION"] == "true"  # no admin/admin to guess
    assert env["GF_AUTH_DISABLE_LOGIN_FORM"] == "true" and env["GF_AUTH_BASIC_ENABLED"] == "false"
    assert env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert not [k for k in env if "ADMIN_PASSWORD" in k or "ADMIN_USER" in k]
    for volume in grafana["volumes"]:
        assert volume["type"] == "bind" and volume["read_only"] is True
        assert (COMPOSE.parent / volume["source"]).is_dir(), volume["source"]


def test_ulimit_flags_replace_the_defaults_by_name() -> None:
    """A host without CAP_SYS_RESOURCE cannot give a container memlock=-1: `--ulimit memlock=N` replaces it."""
    assert dk.with_ulimits([]) == ct.ULIMITS
    assert dict((n, (s, h)) for n, s, h in dk.with_ulimits(["memlock=8388608"]))["memlock"] == (8388608, 8388608)
    assert dict((n, (s, h)) for n, s, h in dk.with_ulimits(["nofile=1024:4096"]))["nofile"] == (1024, 4096)
    assert dict((n, s) for n, s, _ in dk.with_ulimits(["memlock=1"]))["stack"] == 67108864
    for bad in ("memlock", "memlock=x", "=5"):
        with pytest.raises(ValueError):
            dk.parse_ulimit(bad)
