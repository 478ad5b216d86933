"""Watches a local server and restarts it when a Python stub dies or the pipeline stops answering.

Triton 2.51 neither restarts a dead Python-backend stub nor reports it
(upstream server#8604): its ready endpoints keep answering 200 while every
request through the dead step fails, and SIGTERM then waits out the whole
exit timeout. So the supervisor looks for itself. Every second it reads the
server's process group (a killed stub lingers as a zombie, since Triton does
not reap it); every CHECK_S seconds it runs the repository's health check, a
tiny inference through the ensemble. A dead stub, a dead server, or FAILURES
failed checks in a row restart the server with the command it was started
with, and one line goes to supervisor.log. An overloaded server that refuses
the check with 503 (its queues are full) is alive, not failed.

`deploy.py local up` starts it (`python -m tritonize.runtime.supervisor DIR`)
beside the server; `down` stops it first; `status` shows its restart count.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..serving.health import BUSY, HEALTH_FILE, probe_file
from . import process

STATE_FILE = "supervisor.json"
LOG_FILE = "supervisor.log"
POLL_S = 1.0
CHECK_S = 5.0
CHECK_TIMEOUT_S = 10.0
FAILURES = 3  # failed health checks in a row before a restart


@dataclass
class SupervisorState:
    """What the supervisor writes for `status`: who it is, what it is doing, how often it restarted."""

    pid: int
    start_ticks: int | None
    state: str = "watching"  # watching | restarting | stopped
    restarts: int = 0
    last_reason: str = ""
    last_restart_s: float = 0.0  # how long the last restart took, kill to ready
    updated_at: float = 0.0

    def alive(self) -> bool:
        return process.start_ticks(self.pid) == self.start_ticks and not process.is_zombie(self.pid)


def read_state(directory: Path) -> SupervisorState | None:
    try:
        return SupervisorState(**json.loads((Path(directory) / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_state(directory: Path, state: SupervisorState) -> None:
    state.updated_at = time.time()
    tmp = Path(directory) / f"{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(state), indent=2))
    os.replace(tmp, Path(directory) / STATE_FILE)


def log(directory: Path, message: str) -> None:
    with open(Path(directory) / LOG_FILE, "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")


def stub_models(pgid: int) -> dict[int, str]:
    """Live Python-backend stubs of the group: pid -> the model whose model.py it runs."""
    found = {}
    for pid in process.group_processes(pgid):
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(args) > 1 and args[0].endswith(b"triton_python_backend_stub"):
            found[pid] = Path(args[1].decode(errors="replace")).parents[1].name
    return found


class Supervisor:
    def __init__(self, directory: Path):
        from .local import read_instance

        self.directory = Path(directory).resolve()
        self.read_instance = read_instance
        self.state = SupervisorState(pid=os.getpid(), start_ticks=process.start_ticks(os.getpid()))
        self.stopping = False
        self.stubs: dict[int, str] = {}  # remembered while alive: a zombie has no command line left
        self.failures = 0
        self.next_check = time.monotonic() + CHECK_S

    def stop(self, *_: object) -> None:
        self.stopping = True

    def run(self) -> None:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        write_state(self.directory, self.state)
        log(self.directory, f"watching the server in {self.directory} (pid {os.getpid()})")
        while not self.stopping:
            inst = self.read_instance(self.directory)
            if inst is None:  # `down` removed the record: nothing left to watch
                break
            reason = self.fault(inst)
            if reason:
                self.restart(inst, reason)
            time.sleep(POLL_S)
        self.state.state = "stopped"
        write_state(self.directory, self.state)
        log(self.directory, "stopped")

    def fault(self, inst) -> str:
        """Why the server needs a restart now, or ""."""
        if not inst.alive():
            return "tritonserver exited"
        # With explicit model control a stub also ends when its model is unloaded: the health check decides.
        live = stub_models(inst.pid) if inst.model_control != "explicit" else {}
        dead = sorted({name for pid, name in self.stubs.items() if pid not in live})
        self.stubs = {**{p: n for p, n in self.stubs.items() if p in live}, **live}
        if dead:
            return f"the Python stub of {', '.join(dead)} died"
        if time.monotonic() < self.next_check:
            return ""
        self.next_check = time.monotonic() + CHECK_S
        health = Path(inst.repository) / HEALTH_FILE
        if not health.is_file():
            return ""
        result = probe_file(inst.endpoints.http, str(health), CHECK_TIMEOUT_S)
        self.failures = 0 if result.ok or result.code == BUSY else self.failures + 1
        if self.failures >= FAILURES:
            return f"the health check failed {self.failures} times in a row ({result.detail[:200]})"
        return ""

    def restart(self, inst, reason: str) -> None:
        from .base import ServerOptions
        from .local import LocalRuntime

        self.state.state, self.state.last_reason = "restarting", reason
        self.state.restarts += 1
        write_state(self.directory, self.state)
        start = time.monotonic()
        options = ServerOptions(repository=Path(inst.repository), host=inst.host, http_port=inst.http_port,
                                grpc_port=inst.grpc_port, metrics_port=inst.metrics_port, run_dir=self.directory.parent,
                                model_control=inst.model_control)
        runtime = LocalRuntime(options, tritonserver=Path(inst.command[0]), quiet=True)
        try:
            runtime.restart(inst)
            outcome = "restarted"
        except Exception as exc:  # noqa: BLE001 - logged; the next poll tries again
            outcome = f"restart failed: {str(exc).splitlines()[0][:200]}"
        self.state.last_restart_s = round(time.monotonic() - start, 2)
        self.state.state = "watching"
        self.stubs, self.failures = {}, 0
        self.next_check = time.monotonic() + CHECK_S
        write_state(self.directory, self.state)
        log(self.directory, f"{reason}: {outcome} in {self.state.last_restart_s:.1f}s (restart {self.state.restarts})")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tritonize.runtime.supervisor INSTANCE_DIR", file=sys.stderr)
        return 2
    Supervisor(Path(args[0])).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
