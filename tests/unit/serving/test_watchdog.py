"""The serving image's entrypoint (tritonize/serving/watchdog.py), on real processes, run as the image runs it.

The Triton it watches is stood in for by a Python child: what the watchdog reads is the child's process group
and the health check's answer, the same whatever the child serves. The container tests (tests/container/)
run it in the image, around the real Triton.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tritonize.runtime.machine import free_ports
from tritonize.serving import SERVING_DIR
from tritonize.serving.watchdog import RESTART_EXIT, RESTART_LINE, http_url

# A server that starts a child in its own process group and never reaps it: when the child is killed, it
# stays a zombie, as a killed Python-backend stub does under Triton 2.51. It prints the child's pid.
NEGLECTFUL = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
time.sleep(600)
"""


def watchdog(tmp_path: Path, command: list[str], health: dict | None = None, **flags: float) -> subprocess.Popen:
    """The script as the image runs it: by path, beside health.py and procfs.py, with nothing of the package."""
    for name in ("health.py", "procfs.py", "watchdog.py"):
        (tmp_path / name).write_bytes((SERVING_DIR / name).read_bytes())
    health_file = tmp_path / "health.json"
    if health is not None:
        health_file.write_text(json.dumps(health))
    args = [f"--{k.replace('_', '-')}={v}" for k, v in {"interval": 0.5, "retries": 3, "timeout": 1,
                                                         "start_period": 0, **flags}.items()]
    return subprocess.Popen([sys.executable, str(tmp_path / "watchdog.py"), f"--file={health_file}", *args, "--",
                             *command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd="/", env={"PATH": "/usr/bin:/bin"})


def test_a_dead_unreaped_child_ends_the_watchdog_for_a_restart(tmp_path: Path) -> None:
    proc = watchdog(tmp_path, [sys.executable, "-c", NEGLECTFUL])
    stub = int(proc.stdout.readline())
    time.sleep(1.0)
    assert proc.poll() is None  # everything alive: nothing to do (no health.json here)
    start = time.monotonic()
    os.kill(stub, signal.SIGKILL)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == RESTART_EXIT
    assert time.monotonic() - start < 10
    assert out.count(RESTART_LINE) == 1 and "(a dead stub)" in out


def test_failed_health_checks_in_a_row_end_the_watchdog(tmp_path: Path) -> None:
    (port,) = free_ports(1)  # nothing listens there: every check fails
    health = {"model": "m", "request": {"inputs": []}, "outputs": ["y"]}
    start = time.monotonic()
    proc = watchdog(tmp_path, [sys.executable, "-c", "import time; time.sleep(600)", f"--http-port={port}"], health)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == RESTART_EXIT
    assert out.count("health check failed (") == 3 and "failed 3 times in a row" in out
    assert time.monotonic() - start >= 1.5  # three checks, half a second apart


def test_failures_before_the_first_success_wait_for_the_start_period(tmp_path: Path) -> None:
    (port,) = free_ports(1)
    health = {"model": "m", "request": {"inputs": []}, "outputs": ["y"]}
    proc = watchdog(tmp_path, [sys.executable, "-c", "import time; time.sleep(600)", f"--http-port={port}"], health,
                    start_period=60)
    time.sleep(3)
    assert proc.poll() is None  # loading: not counted yet
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=10)


def test_sigterm_goes_to_the_server_and_its_status_is_the_watchdogs(tmp_path: Path) -> None:
    """`docker stop`: the server gets SIGTERM (and drains), and the container ends with its status, not a restart."""
    server = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(7))\nprint('up', flush=True)\ntime.sleep(600)"
    proc = watchdog(tmp_path, [sys.executable, "-c", server])
    assert proc.stdout.readline().strip() == "up"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 7 and RESTART_LINE not in out


def test_the_url_comes_from_tritons_own_flags() -> None:
    assert http_url(["tritonserver", "--http-port=9000", "--http-address=127.0.0.1"]) == "http://127.0.0.1:9000"
    assert http_url(["tritonserver", "--http-address=0.0.0.0"]) == "http://127.0.0.1:8000"
