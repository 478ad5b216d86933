"""`deploy.py local status`: what a local server, its supervisor, its API and its Prometheus report, as one
`ServerStatus`. Ready only when a tiny inference through each ensemble answers: Triton's own ready endpoint keeps
saying ready after a stub has died."""

from __future__ import annotations

from pathlib import Path

from ...api.child import health as api_health
from ...serving.health import HEALTH_FILE, probe_file
from ..base import ServerStatus, http_get, repository_models
from ..instance import ADMIN_HEADER, LOG_FILE, Instance, admin_key, dead_stubs, read_api, read_supervisor
from ..monitoring import LocalPrometheus


def without_server(directory: Path, run_dir: Path) -> ServerStatus:
    """No live server: a supervisor between two tries of a restart says why, else nothing runs."""
    state = read_supervisor(directory)
    if state and state.alive() and state.state != "stopped":
        why = state.last_reason + (f"; last try: {state.last_error}" if state.last_error else "")
        return ServerStatus(True, False, detail=f"{state.state} ({why})", restarts=state.restarts,
                            reloads=state.reloads)
    return ServerStatus(False, False, detail=f"not running (nothing in {run_dir})")


def of_server(directory: Path, inst: Instance, prometheus: LocalPrometheus) -> ServerStatus:
    """The live server `inst` of `directory`, with what runs beside it."""
    endpoints = inst.endpoints
    code, _ = http_get(f"{endpoints.http}/v2/health/ready")
    health_file = Path(inst.repository) / HEALTH_FILE
    if health_file.is_file():
        probe = probe_file(endpoints.http, str(health_file))
        answered, health = probe.ok, probe.detail
    else:
        answered, health = True, f"unchecked: no {HEALTH_FILE} in the repository (regenerate it to get one)"
    state = read_supervisor(directory)
    watched = state is not None and state.alive()
    running = prometheus.running()
    dead = dead_stubs(inst, state)
    detail = (f"{inst.variant} configs, pid {inst.pid}, HTTP {endpoints.http}, gRPC {endpoints.grpc}, "
              f"log {directory / LOG_FILE}")
    if watched and state.state != "watching":
        detail = f"{state.state} ({state.last_reason}); {detail}"
    return ServerStatus(
        running=True,
        ready=code == 200 and answered and not dead,
        endpoints=endpoints,
        models=repository_models(endpoints, {ADMIN_HEADER: admin_key(directory)}),
        detail=detail,
        health=(f"a Python stub has died (pid {', '.join(map(str, dead))}); " if dead else "") + health,
        restarts=state.restarts if watched else None,
        reloads=state.reloads if watched else None,
        prometheus=running.url if running else None,
        monitoring=prometheus.describe(),
        api=api_status(directory),
    )


def api_status(directory: Path) -> str | None:
    """The API's URL and its own /health, in a line; None where none was started."""
    record = read_api(directory)
    if record is None:
        return None
    if not record.alive():
        return f"{record.url}: not running (the supervisor starts it again)"
    code, detail = api_health(record.url)
    restarts = f", {record.restarts} restart(s)" if record.restarts else ""
    return f"{record.url}: " + ("healthy" if code == 200 else f"unhealthy ({code}: {detail})") + restarts
