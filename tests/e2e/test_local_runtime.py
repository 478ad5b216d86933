"""`deploy.py local`: the real tritonserver from the wheel on a tiny repository, started and stopped.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from support import REPO_ROOT as ROOT
from tritonize.errors import TritonizeError
from tritonize.runtime import instance, machine
from tritonize.runtime.base import http_get
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.machine import group_processes


def stub_processes(pgid: int) -> list[int]:
    """Python-backend stubs still in the server's process group."""
    found = []
    for pid in group_processes(pgid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if instance.STUB_NAME.encode() in cmdline:
            found.append(pid)
    return found


def deploy(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "deploy.py"), "local", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def test_busy_port_is_refused_before_starting(tiny_embedding_repo, local_options, tmp_path) -> None:
    options = local_options(tiny_embedding_repo.repository, tmp_path / "run")
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", options.grpc_port))
        blocker.listen()
        with pytest.raises(TritonizeError) as info:
            LocalRuntime(options, quiet=True).up()
    assert f"gRPC port {options.grpc_port}" in info.value.message
    assert "already in use" in info.value.message
    assert "--grpc-port" in info.value.hint
    assert not (tmp_path / "run" / f"local-{options.http_port}" / instance.STATE_FILE).exists()


def test_tritons_own_address_in_use_error_is_shown(tiny_embedding_repo, local_options, tmp_path, monkeypatch) -> None:
    """Another process may take a port between the check and Triton's bind: Triton's message must surface."""
    options = local_options(tiny_embedding_repo.repository, tmp_path / "run")
    monkeypatch.setattr(machine, "port_in_use", lambda host, port: False)
    runtime = LocalRuntime(options, quiet=True)
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", options.grpc_port))
        blocker.listen()
        with pytest.raises(TritonizeError) as info:
            runtime.up()
    message = info.value.message
    assert "exited with code" in message and "a port is already in use" in message
    assert f"127.0.0.1:{options.grpc_port}' already in use" in message  # Triton's own line
    assert "CUDA driver" not in message  # GPU noise is filtered out
    assert "failed to start GRPC service" in runtime.logs()


def test_up_status_logs_down_leaves_no_process(tiny_embedding_repo, local_options, tmp_path, capsys) -> None:
    options = local_options(tiny_embedding_repo.repository, tmp_path / "run")
    runtime = LocalRuntime(options)
    start = time.monotonic()
    endpoints = runtime.up()
    ready_s = time.monotonic() - start
    try:
        pid = runtime.server_pid
        assert http_get(f"{endpoints.http}/v2/health/ready")[0] == 200
        assert endpoints.http == f"http://127.0.0.1:{options.http_port}"
        # The default layout: the texts step and the model step are graphs on the onnxruntime backend, so no
        # Python stub runs at all.
        assert stub_processes(pid) == []

        status = runtime.status()
        assert status.running and status.ready
        states = {m.name: m.state for m in status.models}
        name = tiny_embedding_repo.name
        assert states == {name: "READY", f"{name}_tokenizer": "READY", f"{name}_model": "READY"}
        assert "Started GRPCInferenceService" in runtime.logs()
        assert len(runtime.logs(tail=3).splitlines()) <= 3

        with pytest.raises(TritonizeError, match="already running"):
            LocalRuntime(options, quiet=True).up()
    finally:
        start = time.monotonic()
        runtime.down()
        stop_s = time.monotonic() - start
    print(f"start-to-ready {ready_s:.1f}s, stop {stop_s:.1f}s")
    assert group_processes(pid) == []
    assert not (runtime.directory / instance.STATE_FILE).exists()
    assert not runtime.status().running
    assert runtime.logs()  # the log outlives the server

    capsys.readouterr()
    runtime.down()  # nothing to stop: says so, no error
    assert "no local Triton server is running" in capsys.readouterr().err


def test_context_manager_stops_the_server(tiny_classifier_repo, local_options, tmp_path) -> None:
    options = local_options(tiny_classifier_repo.repository, tmp_path / "run")
    runtime = LocalRuntime(options, quiet=True)
    with runtime as endpoints:
        pid = runtime.server_pid
        assert http_get(f"{endpoints.http}/v2/models/{tiny_classifier_repo.name}/ready")[0] == 200
    assert group_processes(pid) == []
    assert machine.port_in_use("127.0.0.1", options.http_port) is False


def test_failed_model_load_shows_the_servers_error(tiny_python_repo, local_options, tmp_path) -> None:
    repo = tmp_path / "broken"
    shutil.copytree(tiny_python_repo.repository, repo)
    model_py = repo / f"{tiny_python_repo.name}_model" / "1" / "model.py"
    model_py.write_text(model_py.read_text() + "\nimport module_that_does_not_exist_xyz\n")
    runtime = LocalRuntime(local_options(repo, tmp_path / "run"), quiet=True)
    with pytest.raises(TritonizeError) as info:
        runtime.up()
    message = info.value.message
    assert "exited with code" in message
    assert "No module named 'module_that_does_not_exist_xyz'" in message  # from the model status table
    assert "failed to load all models" in message
    assert not (runtime.directory / instance.STATE_FILE).exists()
    assert "UNAVAILABLE" in runtime.logs()


def test_deploy_local_cli(tiny_embedding_repo, local_options, tmp_path) -> None:
    """The commands as a user types them: up returns with the server running, down stops it."""
    o = local_options(tiny_embedding_repo.repository, tmp_path / "run")
    (api_port,) = machine.free_ports(1)
    flags = [
        "--repository", str(o.repository), "--run-dir", str(o.run_dir),
        "--http-port", str(o.http_port), "--grpc-port", str(o.grpc_port), "--metrics-port", str(o.metrics_port),
    ]  # fmt: skip
    up = deploy("up", *flags, "--api-port", str(api_port))
    record = instance.read_instance(o.run_dir / f"local-{o.http_port}")
    pid = record.pid if record else None
    try:
        assert up.returncode == 0, up.stderr
        assert "Triton is ready" in up.stdout
        # The sample request goes to Triton's HTTP routes through the API's front, not to Triton's own port.
        assert f"http://127.0.0.1:{api_port}/v2/models/{tiny_embedding_repo.name}/infer" in up.stdout
        assert f"HTTP     http://127.0.0.1:{o.http_port}  (Triton's own: loopback only" in up.stdout
        assert "Starting Triton" in up.stderr

        status = deploy("status", *flags)
        assert status.returncode == 0 and "READY" in status.stdout
        # Ready because a real inference answered, and a supervisor watches the server.
        assert f"health: {tiny_embedding_repo.name} answered in" in status.stdout
        assert "supervised: 0 restart(s), 0 step reload(s) so far" in status.stdout

        logs = deploy("logs", *flags, "--tail", "20")
        assert logs.returncode == 0 and "HTTPService" in logs.stdout

        busy = deploy("up", *flags)
        assert busy.returncode == 2 and "already running" in busy.stderr
    finally:
        down = deploy("down", *flags)
    assert down.returncode == 0, down.stderr
    assert pid is not None and group_processes(pid) == []
    watcher = instance.read_supervisor(o.run_dir / f"local-{o.http_port}")
    assert watcher is not None and watcher.state == "stopped" and not watcher.alive()
    again = deploy("down", *flags)
    assert again.returncode == 0 and "no local Triton server is running" in again.stderr
    assert deploy("status", *flags).returncode == 1


def test_a_repository_with_the_earlier_fused_config_name_is_still_served_and_read(tiny_python_repo, local_options,
                                                                                   tmp_path) -> None:
    """Repositories written before the fused variant's configs were named configs/fused.pbtxt hold
    configs/local.pbtxt: the fused variant is served from those (not from config.pbtxt, which Triton falls back to
    for a name it does not find), the in-process chain reads them, and re-rendering keeps their name."""
    import json

    import numpy as np

    from tritonize import chain, repository
    from tritonize.client import TextClient
    from tritonize.spec import CONFIGS_DIR, EARLIER_FUSED_CONFIG_NAME, FUSED_CONFIG_NAME, FUSED_VARIANT
    from tritonize.spec.options import Overrides

    repo = tmp_path / "earlier"
    shutil.copytree(tiny_python_repo.repository, repo)
    renamed = list(repo.glob(f"*/{CONFIGS_DIR}/{FUSED_CONFIG_NAME}.pbtxt"))
    assert len(renamed) == 4  # the ensemble, the idle tokenizer and statistics steps, and the fused step
    for config in renamed:
        config.rename(config.with_name(f"{EARLIER_FUSED_CONFIG_NAME}.pbtxt"))
    assert repository.variant_config(repo, FUSED_VARIANT) == EARLIER_FUSED_CONFIG_NAME
    expected = chain.in_process(tiny_python_repo.repository)([("hello",)]).outputs["embedding"]
    np.testing.assert_allclose(chain.in_process(repo)([("hello",)]).outputs["embedding"], expected, atol=1e-6)

    repository.reconfigure(repo, Overrides(gather_us=0))
    assert not list(repo.glob(f"*/{CONFIGS_DIR}/{FUSED_CONFIG_NAME}.pbtxt"))
    step = repo / f"{tiny_python_repo.name}_model" / CONFIGS_DIR / f"{EARLIER_FUSED_CONFIG_NAME}.pbtxt"
    assert 'key: "gather_us" value: { string_value: "0" }' in step.read_text()

    runtime = LocalRuntime(local_options(repo, tmp_path / "run"), quiet=True)
    with runtime as endpoints:
        assert runtime.config_name == EARLIER_FUSED_CONFIG_NAME
        status, body = http_get(f"{endpoints.http}/v2/models/{tiny_python_repo.name}_model/config")
        assert status == 200 and json.loads(body)["backend"] == "python"  # the fused step, not onnxruntime's
        with TextClient(endpoints.grpc, tiny_python_repo.name) as client:
            np.testing.assert_allclose(client.embed(["hello"]), expected, atol=1e-5)
