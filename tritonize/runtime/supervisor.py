"""Watches a local server and brings a failed step back: reloads that step alone, or restarts the server.

Triton 2.51 neither restarts a dead Python-backend stub nor reports it
(upstream server#8604): its ready endpoints keep answering 200 while every
request through the dead step fails, and SIGTERM then waits out the whole
exit timeout. So the supervisor looks for itself. Every POLL_S it reads the
server's process group (a killed stub lingers as a zombie, since Triton does
not reap it); every CHECK_S it runs the repository's health check, a tiny
inference through the ensemble. An overloaded server that refuses the check
with 503 (its queues are full) is alive, not failed.

How it recovers:

- a dead stub whose step it knows, on a server with explicit model control:
  that step alone is loaded again through the model-repository API, the
  other steps and the ensemble serving on. The load carries the step's served
  config with RELOAD_PARAMETER changed: Triton 2.51 skips the load of an
  unchanged model, and keeps the instances of a model whose config changed
  in instance settings only, dead stub included;
- anything else (no model control, a stub it never saw alive, a dead server,
  FAILURES failed checks in a row, a check that fails once the repository
  has changed since the server started, a reload that failed): the server is
  stopped and started again from its record (`server.json`), retried with
  backoff until it answers. A stub of the new server that dies while it
  loads its models stops that try at once: Triton 2.51 never finishes such
  a load.

A repository changed under a running server (a model added by `generate
--add`) is checked at once: generate writes the manifest last, so a newer
manifest means a whole repository, and a check that fails then is not
a passing fault but a server that does not serve what the repository holds.

It keeps the server it watches in memory and rewrites its record at each
start; only SIGTERM (`down`, which stops it before the server) ends it. One
line per event goes to supervisor.log; supervisor.json holds its state for
`status` and `down`. `deploy.py local up` starts it
(`python -m tritonize.runtime.supervisor DIR`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import TritonizeError
from ..serving.health import BUSY, HEALTH_FILE, probe_file
from ..spec import MANIFEST_FILE
from . import machine
from .base import http_get, http_post, wait_ready
from .instance import (
    ADMIN_HEADER,
    SUPERVISOR_LOG_FILE,
    Instance,
    SupervisorState,
    admin_key,
    check_ports,
    dead_stubs,
    ports_free,
    read_api,
    read_instance,
    spawn,
    spawn_api,
    start_failure,
    stop,
    stub_models,
    write_supervisor,
)

POLL_S = 0.5
CHECK_S = 5.0
CHECK_TIMEOUT_S = 10.0
FAILURES = 3  # failed health checks in a row before a restart
DRAIN_S = 5.0  # a server restarted with every stub alive gets this long to finish its requests
RETRY_FIRST_S = 1.0  # a failed restart is tried again after this, doubling up to RETRY_MAX_S
RETRY_MAX_S = 30.0
PORTS_FREE_S = 5.0  # how long a restart waits for the old server's ports before it counts as failed
RELOAD_TIMEOUT_S = 30.0
RELOAD_PARAMETER = "tritonize_reload"  # changed in a step's config to make Triton load it again


@dataclass(frozen=True)
class Fault:
    """Why the server needs help now, and what is known about it."""

    reason: str
    steps: tuple[str, ...] = ()  # the steps whose stubs died, when every dead stub's step is known
    stubs: tuple[int, ...] = ()  # those dead stubs (zombies)


class Stopped(Exception):
    """SIGTERM arrived while recovering: supervision ends; `down` stops whatever server the record names."""


def log(directory: Path, message: str) -> None:
    with open(Path(directory) / SUPERVISOR_LOG_FILE, "a", encoding="utf-8") as f:
        f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}\n")


def first_line(exc: BaseException) -> str:
    """An error in one line: its first, and the first of the server's log lines a failed start quotes."""
    lines = str(exc).splitlines() or [type(exc).__name__]
    quoted = next((line.strip(" |") for line in lines[1:] if line.strip(" |")), "")
    return f"{lines[0]} {quoted}".strip()[:300]


class Supervisor:
    """One instance directory's watcher: polls, recovers, and writes what it did for `status`."""

    def __init__(self, directory: Path):
        self.directory = Path(directory).resolve()
        self.inst: Instance | None = read_instance(self.directory)  # the server watched, in memory: its record
        # on disk is rewritten at each start and removed by `down` only, after this process has ended
        self.proc: subprocess.Popen | None = None  # the server, once this process started it
        self.state = SupervisorState(pid=os.getpid(), start_ticks=machine.start_ticks(os.getpid()),
                                     server_pid=self.inst.pid if self.inst else 0)
        self.stopping = False
        self.stubs: dict[int, str] = {}  # stub pid -> step, remembered while alive: a zombie has no command line
        self.failures = 0
        self.next_check = time.monotonic() + CHECK_S
        self.served_stamp = self.repository_stamp()  # the repository as the watched server loaded it

    def stop(self, *_: object) -> None:
        self.stopping = True

    def pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.stopping and time.monotonic() < deadline:
            time.sleep(min(0.05, seconds))

    def save(self, state: str | None = None) -> None:
        if state:
            self.state.state = state
        write_supervisor(self.directory, self.state)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        if self.inst is None:
            log(self.directory, f"no server record in {self.directory}: nothing to watch")
            return 1
        self.save()
        log(self.directory, f"watching the server in {self.directory} (pid {os.getpid()})")
        self.stubs = stub_models(self.inst.pid)
        while not self.stopping and self.directory.is_dir():
            try:
                fault = self.fault()
                if fault:
                    self.recover(fault)
                self.watch_api()
            except Stopped:
                break
            except Exception as exc:  # noqa: BLE001 - supervision outlives any one bad poll; logged
                log(self.directory, f"supervisor error ({type(exc).__name__}: {first_line(exc)}); watching on")
                self.pause(RETRY_FIRST_S)
            self.pause(POLL_S)
        if self.directory.is_dir():
            self.save("stopped")
            log(self.directory, "stopped")
        return 0

    def watch_api(self) -> None:
        """The HTTP API beside the server (`up` starts it unless --no-api): started again when it has exited."""
        record = read_api(self.directory)
        if record is None or record.alive():
            return
        started = spawn_api(self.directory, replace(record, restarts=record.restarts + 1))
        log(self.directory, f"the API (pid {record.pid}) exited: started again as pid {started.pid} "
                            f"(API restart {started.restarts})")

    def fault(self) -> Fault | None:
        """Why the server needs a reload or a restart now, or None."""
        inst = self.inst
        assert inst is not None
        if not inst.alive():
            return Fault("tritonserver exited")
        live = stub_models(inst.pid)
        dead = dead_stubs(inst, self.state)
        if dead and not inst.alive():  # the server died meanwhile and its stubs with it: the server is the cause
            return Fault("tritonserver exited")
        self.stubs = {pid: step for pid, step in {**self.stubs, **live}.items() if pid in live or pid in dead}
        if dead:
            known = all(pid in self.stubs for pid in dead)
            steps = sorted({self.stubs[pid] for pid in dead if pid in self.stubs})
            which = ", ".join(steps) if known else f"pid {', '.join(map(str, dead))}"
            return Fault(f"the Python stub of {which} died", tuple(steps) if known else (), tuple(dead))
        stamp = self.repository_stamp()
        changed = stamp != self.served_stamp
        if time.monotonic() < self.next_check and not changed:
            return None
        self.next_check = time.monotonic() + CHECK_S
        health = Path(inst.repository) / HEALTH_FILE
        if not health.is_file():
            return None
        result = probe_file(inst.endpoints.http, str(health), CHECK_TIMEOUT_S)
        healthy = result.ok or result.code == BUSY
        if changed and not healthy:
            return Fault(f"the repository changed since the server started, and its health check fails "
                         f"({result.detail[:200]})")
        self.served_stamp = stamp
        self.failures = 0 if healthy else self.failures + 1
        if self.failures >= FAILURES:
            return Fault(f"the health check failed {self.failures} times in a row ({result.detail[:200]})")
        return None

    def repository_stamp(self) -> int | None:
        """When the manifest was last written (generate writes it last): a newer one is a changed repository."""
        try:
            return (Path(self.inst.repository) / MANIFEST_FILE).stat().st_mtime_ns if self.inst else None
        except OSError:
            return None

    def recover(self, fault: Fault) -> None:
        start = time.monotonic()
        self.state.last_reason, self.state.last_error = fault.reason, ""
        assert self.inst is not None
        if fault.steps and self.inst.model_control == "explicit":
            self.save("reloading")
            why = self.reload(fault.steps)
            if why is None:
                self.state.reloads += 1
                self.state.replaced_stubs = sorted({*self.state.replaced_stubs, *fault.stubs})
                self.done(start, f"{fault.reason}: reloaded {', '.join(fault.steps)}", f"reload {self.state.reloads}")
                return
            if self.stopping:
                raise Stopped
            log(self.directory, f"{fault.reason}: reload failed ({why}); restarting the server")
        self.state.restarts += 1
        self.save("restarting")
        tries = self.restart_until_up()
        after = f" after {tries} tries" if tries > 1 else ""
        self.done(start, f"{fault.reason}: restarted{after}", f"restart {self.state.restarts}")

    def done(self, start: float, what: str, count: str) -> None:
        assert self.inst is not None
        self.state.last_recovery_s = round(time.monotonic() - start, 2)
        self.state.last_error = ""
        self.stubs = stub_models(self.inst.pid)
        self.failures = 0
        self.next_check = time.monotonic() + CHECK_S
        # Logged before the state says "watching": whoever reads the recovery in the status finds it in the log.
        log(self.directory, f"{what} in {self.state.last_recovery_s:.1f}s ({count})")
        self.save("watching")

    # whole-server restart
    def restart_until_up(self) -> int:
        """Restart until the server answers, waiting longer after each failed try; the number of tries."""
        delay, tries = RETRY_FIRST_S, 0
        while True:
            if self.stopping:
                raise Stopped
            tries += 1
            try:
                self.restart()
                return tries
            except (TritonizeError, OSError) as exc:
                if self.stopping:
                    raise Stopped from None
                self.state.last_error = first_line(exc)
                self.save()
                log(self.directory, f"{self.state.last_reason}: restart failed ({self.state.last_error}); "
                                    f"trying again in {delay:.0f}s")
            self.pause(delay)
            delay = min(2 * delay, RETRY_MAX_S)

    def restart(self) -> None:
        """Stop the server (at once when a stub is dead: nothing drains through it), start it again from its
        record, and wait until it is ready."""
        old = self.inst
        assert old is not None
        if old.alive() or machine.group_processes(old.pid):
            drain = 0.0 if not old.alive() or dead_stubs(old, self.state) else DRAIN_S
            if not stop(old, drain, self.proc):
                raise TritonizeError(f"the processes of the old server (group {old.pid}) did not exit")
        deadline = time.monotonic() + PORTS_FREE_S
        ports = (old.http_port, old.grpc_port, old.metrics_port)
        while not ports_free(old.host, ports) and time.monotonic() < deadline:
            if self.stopping:
                raise Stopped
            time.sleep(0.05)
        check_ports(old.host, old.http_port, old.grpc_port, old.metrics_port)  # says which port is still taken
        self.served_stamp = self.repository_stamp()  # what the new server loads: changes from now on are new
        self.proc, self.inst = spawn(self.directory, old)
        self.state.server_pid, self.state.replaced_stubs = self.inst.pid, []
        self.save()
        try:
            self.wait_started()
        except Stopped:
            raise
        except BaseException:
            stop(self.inst, 0.0, self.proc)
            raise

    def wait_started(self) -> None:
        inst, proc = self.inst, self.proc
        assert inst is not None and proc is not None

        def alive() -> bool:
            if self.stopping:
                raise Stopped
            if dead_stubs(inst):
                raise TritonizeError("a Python stub died while Triton loaded its models (Triton 2.51 never "
                                     "finishes such a load)")
            return proc.poll() is None

        try:
            wait_ready(inst.endpoints, inst.ready_timeout_s, alive, poll_s=0.1)
        except TritonizeError as exc:
            raise start_failure(self.directory, exc, proc.poll()) from None

    # one step reloaded
    def reload(self, steps: tuple[str, ...]) -> str | None:
        """Load each step again with its served config (RELOAD_PARAMETER changed); None once the ensemble answers,
        else why not."""
        inst = self.inst
        assert inst is not None
        http = inst.endpoints.http
        headers = {ADMIN_HEADER: admin_key(self.directory), "Content-Type": "application/json"}
        before = set(machine.group_zombies(inst.pid))
        for step in steps:
            code, body = http_get(f"{http}/v2/models/{step}/config", timeout=5.0)
            if code != 200:
                return f"the config of {step} did not answer (HTTP {code})"
            config = json.loads(body)
            config.setdefault("parameters", {})[RELOAD_PARAMETER] = {"string_value": str(time.time_ns())}
            payload = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
            answer: list[tuple[int, bytes]] = []
            load = threading.Thread(
                target=lambda: answer.append(http_post(f"{http}/v2/repository/models/{step}/load", payload, headers,
                                                       RELOAD_TIMEOUT_S)),
                daemon=True,
            )
            load.start()
            deadline = time.monotonic() + RELOAD_TIMEOUT_S
            while load.is_alive():
                load.join(0.05)
                if self.stopping:
                    return "supervision stopped"
                if not inst.alive():
                    return "tritonserver exited"
                if set(machine.group_zombies(inst.pid)) - before:  # settled below: Triton ends stubs itself too
                    new = sorted(set(dead_stubs(inst, self.state)) - before)
                    if new:
                        return f"a stub died during the reload (pid {', '.join(map(str, new))})"
                if time.monotonic() > deadline:
                    return f"the load did not answer in {RELOAD_TIMEOUT_S:.0f}s"
            code, body = answer[0] if answer else (0, b"")
            if code != 200:
                return f"the load of {step} answered HTTP {code}: {body[:200].decode(errors='replace')}"
        health = Path(inst.repository) / HEALTH_FILE
        if health.is_file():
            result = probe_file(http, str(health), CHECK_TIMEOUT_S)
            if not (result.ok or result.code == BUSY):
                return f"the health check failed after the reload ({result.detail[:200]})"
        return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tritonize.runtime.supervisor INSTANCE_DIR", file=sys.stderr)
        return 2
    return Supervisor(Path(args[0])).run()


if __name__ == "__main__":
    sys.exit(main())
