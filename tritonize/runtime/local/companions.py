"""What runs beside a local server, each in its own process: the HTTP API on its gRPC port, the supervisor that
brings it back (supervisor.py, which it never imports: they share instance.py), and a Prometheus that scrapes it
(monitoring.py). `LocalRuntime` starts them after the server and stops them around it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ...api.child import ApiOptions, ApiProcess
from ...api.child import wait_healthy as wait_api_healthy
from ...errors import TritonizeError
from ...paths import child_pythonpath
from .. import machine
from ..base import Endpoints, ServerOptions
from ..instance import (
    API_LOG_FILE,
    SUPERVISOR_LOG_FILE,
    SUPERVISOR_MODULE,
    SUPERVISOR_STATE_FILE,
    ApiRecord,
    read_supervisor,
    spawn_api,
    stop_api,
)
from ..monitoring import FIRST_SCRAPE_S, LocalPrometheus

API_READY_S = 60.0  # the API's /health must answer within this after the server is ready
SUPERVISOR_STOP_S = 60.0  # a supervisor in the middle of a restart ends its try on SIGTERM; SIGKILL after this

Say = Callable[[str], None]


# -- the HTTP API ---------------------------------------------------------


def start_api(directory: Path, options: ServerOptions, api: ApiOptions, endpoints: Endpoints, say: Say) -> ApiRecord:
    """`tritonize api` on the server's gRPC port, healthy (a real inference through every model) before `up`
    returns; the supervisor starts it again if it exits."""
    o = options
    if machine.port_in_use(o.host, api.port):
        raise TritonizeError(f"API port {api.port} on {o.host} already in use",
                             hint="choose another with --api-port, or --no-api")
    child = ApiProcess(Path(o.repository).resolve(), endpoints.grpc, endpoints.http, host=o.host, port=api.port,
                       key_file=api.key_file, workers=api.workers)
    record = spawn_api(directory, ApiRecord(0, None, child.url, child.command(), {"PYTHONPATH": child_pythonpath()}))
    try:
        took = wait_api_healthy(record.url, record.alive, API_READY_S, directory / API_LOG_FILE)
    except TritonizeError as exc:
        stop_api(directory)
        raise TritonizeError(exc.message, hint=f"{exc.hint}, or start without it: --no-api") from None
    say(f"[green]✓[/] API on {record.url} (OpenAI, Cohere/Jina, TEI routes) [dim]({took:.1f}s)[/]")
    return record


# -- the supervisor -------------------------------------------------------


def start_supervisor(directory: Path, say: Say) -> None:
    (directory / SUPERVISOR_STATE_FILE).unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": child_pythonpath()}
    with open(directory / SUPERVISOR_LOG_FILE, "ab") as log:
        subprocess.Popen([sys.executable, "-m", SUPERVISOR_MODULE, str(directory)],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                         cwd=directory, start_new_session=True)
    deadline = time.monotonic() + 10.0
    while read_supervisor(directory) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    say("[green]✓[/] supervisor watching the server (brings it back if a stub dies or it stops answering)")


def stop_supervisor(directory: Path) -> None:
    """Stop the supervisor before the server, so that it does not restart what is being stopped."""
    state = read_supervisor(directory)
    if state is None or not state.alive():
        return
    _signal_pid(state.pid, signal.SIGTERM)
    deadline = time.monotonic() + SUPERVISOR_STOP_S
    while state.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if state.alive():
        _signal_pid(state.pid, signal.SIGKILL)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


# -- Prometheus -----------------------------------------------------------


def report_first_scrape(prometheus: LocalPrometheus, say: Say) -> None:
    """Prometheus runs either way; whether it could scrape the server is said, not raised."""
    every = prometheus.options.scrape_interval_s
    target = prometheus.wait_scraped(FIRST_SCRAPE_S + 2 * every)
    if target and target.get("health") == "up":
        say(f"[green]✓[/] Prometheus {prometheus.url} scrapes the metrics port every {every:g}s")
    else:
        why = (target or {}).get("lastError") or "no scrape yet"
        say(f"[yellow]Prometheus {prometheus.url} runs, but has not scraped the metrics port: {why}; "
            f"see {prometheus.log_file}[/]")


def stop_prometheus(prometheus: LocalPrometheus, directory: Path, say: Say) -> None:
    if prometheus.stop():
        say(f"[green]✓[/] Prometheus stopped (its data stays in {directory / 'prometheus'})")
