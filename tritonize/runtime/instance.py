"""A local server's instance directory and process group: what `local.py` and `supervisor.py` share.

`deploy.py local up` (local.py) starts a server and writes its record; the
supervisor (supervisor.py) watches it and starts it again from that record.
Neither imports the other: both read and write the files named here and
start, stop and inspect the server's process group with the functions here.

The instance directory `<run_dir>/local-<http_port>/` holds:

- `server.json`: the running server's record (pid, ports, command, environment);
  written at each start, removed only by `down`;
- `tritonserver.log` (and `.log.1`, the previous start's);
- `admin.key`: the key for the restricted APIs;
- `supervisor.json` and `supervisor.log`: the supervisor's state and its one line per event;
- `api.json` and `api.log`: the HTTP API beside the server (`tritonize api`), when one runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..errors import TritonizeError
from ..spec import EARLIER_FUSED_CONFIG_NAME, FUSED_VARIANT, VARIANT_CONFIGS
from . import machine
from .base import Endpoints

STATE_FILE = "server.json"
LOG_FILE = "tritonserver.log"
ADMIN_KEY_FILE = "admin.key"
ADMIN_HEADER = "tritonize-admin-key"  # the header that carries the key (Triton's --http-restricted-api)
SUPERVISOR_STATE_FILE = "supervisor.json"
SUPERVISOR_LOG_FILE = "supervisor.log"
API_FILE = "api.json"  # the HTTP API's record (pid, URL, command): `up` writes it, the supervisor restarts from it
API_LOG_FILE = "api.log"
SUPERVISOR_MODULE = "tritonize.runtime.supervisor"  # run as `python -m` beside the server
STUB_NAME = "triton_python_backend_stub"
SHM_PREFIX = "triton_python_backend_shm_region_"  # the Python backend's shared memory, one region per stub
KILL_WAIT_S = 10.0  # after SIGKILL, how long the group may take to go
SETTLE_S = 0.2  # a zombie stub still there after this long is dead; Triton reaps the stubs it ends within ms


# -- the server's record ----------------------------------------------------


@dataclass
class Instance:
    """What `up` leaves in the instance directory: enough for down/status/logs, and for the supervisor to start
    the same server again."""

    pid: int
    start_ticks: int | None
    repository: str
    host: str
    reach_host: str
    http_port: int
    grpc_port: int
    metrics_port: int
    command: list[str]
    started_at: float
    env: dict[str, str] = field(default_factory=dict)  # set over the caller's environment (library path, PATH)
    ready_timeout_s: float = 180.0

    @property
    def endpoints(self) -> Endpoints:
        bound = next((a.split("=", 1)[1] for a in self.command if a.startswith("--http-address=")), self.reach_host)
        return Endpoints(self.reach_host, self.http_port, self.grpc_port, self.metrics_port,
                         machine.reach_host(bound))

    @property
    def model_control(self) -> str:
        """none | explicit, as the server was started (explicit: the load API is on)."""
        return "explicit" if "--model-control-mode=explicit" in self.command else "none"

    @property
    def variant(self) -> str:
        """Which configs the server was started on (spec.VARIANT_CONFIGS), read from its command line."""
        named = next((a.split("=", 1)[1] for a in self.command if a.startswith("--model-config-name=")), None)
        if named == EARLIER_FUSED_CONFIG_NAME:
            return FUSED_VARIANT
        return next((v for v, name in VARIANT_CONFIGS.items() if name == named), f"configs/{named}.pbtxt")

    def alive(self) -> bool:
        machine.reap(self.pid)
        ticks = machine.start_ticks(self.pid)
        return ticks is not None and ticks == self.start_ticks and not machine.is_zombie(self.pid)


def instance_dir(run_dir: Path, http_port: int) -> Path:
    return Path(run_dir) / f"local-{http_port}"


def read_instance(directory: Path) -> Instance | None:
    try:
        return Instance(**json.loads((Path(directory) / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _write_private(path: Path, text: str) -> None:
    """Replace a file atomically, readable by this user only (the command line in it holds the admin key)."""
    tmp = path.with_name(f"{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def write_instance(directory: Path, inst: Instance) -> None:
    _write_private(Path(directory) / STATE_FILE, json.dumps(asdict(inst), indent=2))


def forget(directory: Path) -> None:
    """Drop the record (pid, ports, command): only `down` does, after stopping the supervisor and the server.
    The log stays for `logs`."""
    (Path(directory) / STATE_FILE).unlink(missing_ok=True)


def admin_key(directory: Path) -> str:
    """An instance's key for the restricted APIs: made once, readable by this user only."""
    path = Path(directory) / ADMIN_KEY_FILE
    if not path.is_file():
        import secrets

        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(24))
    return path.read_text().strip()


# -- the supervisor's state -------------------------------------------------


@dataclass
class SupervisorState:
    """What the supervisor writes for `status` and `down`: who it is, what it is doing, what it has done."""

    pid: int
    start_ticks: int | None
    state: str = "watching"  # watching | reloading | restarting | stopped
    restarts: int = 0  # whole-server restarts
    reloads: int = 0  # one step reloaded through the model-repository API, the rest serving on
    last_reason: str = ""
    last_recovery_s: float = 0.0  # how long the last recovery took, noticed to answering again
    last_error: str = ""  # why the last try failed, while retrying
    server_pid: int = 0  # the server watched now
    replaced_stubs: list[int] = field(default_factory=list)  # its dead stubs whose step a reload replaced
    updated_at: float = 0.0

    def alive(self) -> bool:
        return machine.start_ticks(self.pid) == self.start_ticks and not machine.is_zombie(self.pid)


def read_supervisor(directory: Path) -> SupervisorState | None:
    try:
        return SupervisorState(**json.loads((Path(directory) / SUPERVISOR_STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_supervisor(directory: Path, state: SupervisorState) -> None:
    state.updated_at = time.time()
    _write_private(Path(directory) / SUPERVISOR_STATE_FILE, json.dumps(asdict(state), indent=2))


# -- the process group --------------------------------------------------------


def stub_models(pgid: int) -> dict[int, str]:
    """Live Python-backend stubs of the group: pid -> the model whose model.py it runs."""
    found = {}
    for pid in machine.group_processes(pgid):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(args) > 1 and args[0].endswith(STUB_NAME.encode()):
            model_py = Path(args[1].decode(errors="replace"))  # <repository>/<model>/<version>/model.py
            if len(model_py.parents) > 2:  # a stub caught in exec has no arguments yet
                found[pid] = model_py.parents[1].name
    return found


def dead_stubs(inst: Instance, supervisor: SupervisorState | None = None, settle_s: float = SETTLE_S) -> list[int]:
    """Stubs of the server that died and still fail their step.

    Triton 2.51 never reaps a killed stub, so it stays a zombie in the group, while a stub that Triton ends
    itself (a model loaded or unloaded) is a zombie for a few milliseconds only: a zombie counts once it is
    still there settle_s later. Once the supervisor has reloaded its step, a dead stub's zombie is left over
    but the step serves again (`replaced_stubs`).
    """
    replaced = set(supervisor.replaced_stubs) if supervisor and supervisor.server_pid == inst.pid else set()

    def zombies() -> set[int]:
        return {pid for pid in machine.group_zombies(inst.pid) if pid != inst.pid and pid not in replaced}

    found = zombies()
    if found and settle_s > 0:
        time.sleep(settle_s)
        found &= zombies()
    return sorted(found)


def check_ports(host: str, http_port: int, grpc_port: int, metrics_port: int) -> None:
    ports = {"HTTP": http_port, "gRPC": grpc_port, "metrics": metrics_port}
    if len(set(ports.values())) != len(ports):
        raise TritonizeError(f"the HTTP, gRPC and metrics ports must differ: {ports}")
    busy = [f"{name} port {port}" for name, port in ports.items()
            if machine.port_in_use(machine.loopback(host) if name == "HTTP" else host, port)]
    if busy:
        flags = " / ".join(f"--{n.lower()}-port" for n, p in ports.items() if f"{n} port {p}" in busy)
        raise TritonizeError(
            f"{' and '.join(busy)} on {host} already in use",
            hint=f"stop what listens there, or choose free ports with {flags}",
        )


def ports_free(host: str, ports: tuple[int, ...]) -> bool:
    """True when nothing listens on any of the ports (a stopped server's last threads may still hold them)."""
    return not any(machine.port_in_use(host, port) for port in ports)


def spawn(directory: Path, record: Instance) -> tuple[subprocess.Popen, Instance]:
    """Start the server a record describes (its command, its environment) and write its new record.

    Own session: one signal to the group stops the server and its stubs. cwd is the instance directory, so
    nothing in the user's cwd shadows a package. The previous start's log is kept as `.log.1`.
    """
    directory = Path(directory)
    log_file = directory / LOG_FILE
    if log_file.exists():
        log_file.replace(log_file.with_suffix(".log.1"))
    with open(log_file, "wb") as log:
        proc = subprocess.Popen(
            record.command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **record.env},
            cwd=directory,
            start_new_session=True,
        )
    inst = replace(record, pid=proc.pid, start_ticks=machine.start_ticks(proc.pid), started_at=time.time())
    write_instance(directory, inst)
    return proc, inst


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def wait_gone(inst: Instance, timeout_s: float, proc: subprocess.Popen | None = None) -> bool:
    """True once the server and every process of its group have exited, every thread of each (zombies count as
    gone): only then are its ports free."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc is not None:
            proc.poll()
        if not inst.alive() and machine.group_exited(inst.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def shm_regions(pid: int) -> set[Path]:
    """The Python backend's shared-memory regions a server has mapped (one per stub, in /dev/shm)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    return {Path(line.split(maxsplit=5)[5]) for line in maps.splitlines()
            if len(line.split(maxsplit=5)) == 6 and Path(line.split(maxsplit=5)[5]).name.startswith(SHM_PREFIX)}


def stop(
    inst: Instance,
    timeout_s: float,
    proc: subprocess.Popen | None = None,
    on_timeout: Callable[[], None] = lambda: None,
) -> bool:
    """SIGTERM to the group (Triton drains in-flight requests), SIGKILL after timeout_s (0: at once); True once
    the group has gone. A killed server cannot remove its stubs' shared-memory regions: they are removed here."""
    regions = shm_regions(inst.pid)
    if timeout_s > 0:
        _signal_group(inst.pid, signal.SIGTERM)
        if wait_gone(inst, timeout_s, proc):
            return True
        on_timeout()
    _signal_group(inst.pid, signal.SIGKILL)
    gone = wait_gone(inst, KILL_WAIT_S, proc)
    if gone:
        for region in regions:
            region.unlink(missing_ok=True)
    return gone


def start_failure(directory: Path, exc: TritonizeError, code: int | None) -> TritonizeError:
    """A failed start's error with the server's own error lines from its log added."""
    log_file = Path(directory) / LOG_FILE
    log = machine.tail_lines(log_file, None)
    lines = machine.relevant_log_lines(log)
    head = exc.message if code is None else f"Triton exited with code {code} before it became ready"
    if any(m in log.lower() for m in machine.ADDRESS_IN_USE):
        head += " (a port is already in use)"
    detail = "\n".join(f"  | {line}" for line in lines) if lines else "  (no error lines in the log)"
    return TritonizeError(f"{head}; from {log_file}:\n{detail}", hint=exc.hint or f"the whole log: {log_file}")


# -- the HTTP API beside the server -------------------------------------------


@dataclass
class ApiRecord:
    """`tritonize api` started beside the server: its process, its URL, and how often the supervisor started
    it again. Written at each start; removed by `down`."""

    pid: int
    start_ticks: int | None
    url: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    restarts: int = 0

    def alive(self) -> bool:
        machine.reap(self.pid)
        ticks = machine.start_ticks(self.pid)
        return ticks is not None and ticks == self.start_ticks and not machine.is_zombie(self.pid)


def read_api(directory: Path) -> ApiRecord | None:
    try:
        return ApiRecord(**json.loads((Path(directory) / API_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def spawn_api(directory: Path, record: ApiRecord) -> ApiRecord:
    """Start the API a record describes, in its own session (its log appended to api.log), and record it."""
    directory = Path(directory)
    with open(directory / API_LOG_FILE, "ab") as out:
        proc = subprocess.Popen(record.command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **record.env}, cwd=directory, start_new_session=True)
    started = replace(record, pid=proc.pid, start_ticks=machine.start_ticks(proc.pid))
    _write_private(directory / API_FILE, json.dumps(asdict(started), indent=2))
    return started


def stop_api(directory: Path, timeout_s: float = 10.0) -> bool:
    """SIGTERM to the API's group (uvicorn finishes what it answers), SIGKILL after timeout_s; the record goes."""
    record = read_api(directory)
    (Path(directory) / API_FILE).unlink(missing_ok=True)
    if record is None or not record.alive():
        return False
    _signal_group(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while record.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    if record.alive():
        _signal_group(record.pid, signal.SIGKILL)
    return True
