"""The serving image's entrypoint: runs Triton, and ends the container when its health check keeps failing.

Docker restarts a container only when its main process exits, and Triton 2.51
neither restarts a dead Python stub nor exits: its ready endpoint stays 200,
the image's HEALTHCHECK turns `unhealthy`, and nothing else happens. So this
process runs Triton as its child, in a process group of its own, and stops it
and exits with RESTART_EXIT when

- a process of that group has died and stays unreaped for SETTLE_S: a dead
  stub (procfs.py; Triton reaps the stubs it ends itself at once), or
- the repository's health check (a tiny inference through the ensemble,
  health.py), run every --interval seconds, fails --retries times in a row
  (a hung server; one dead stub among several instances of a step fails
  only some requests, which is why the zombies are read too).

The container's restart policy (`unless-stopped`, in compose and `deploy.py
docker`) then starts it afresh, and Kubernetes counts a container restart.

Checks that fail before the first success count only after --start-period
(the first load). A check refused with 503 (full queues) is a busy server,
not a failed one. SIGTERM and SIGINT go to Triton once no gRPC client holds a connection to it (`drain`: the HTTP
API answers what it holds first), and Triton drains what is left; this process
then exits with Triton's status, so `docker stop` never restarts anything.
Each restart is one line on stdout that starts with RESTART_LINE, so the
container's log counts them.

Triton runs with the library path extended by every folder of its model repository that holds the tokenizer
graphs' operator library (OPERATOR_LIBRARY, which their configs name by its bare name), wherever the repository
is mounted and whatever the working directory (`operator_library_path`).

Standard library only: it runs in the serving image beside health.py and procfs.py
(`python3 /opt/tritonize/watchdog.py [options] -- tritonserver ...`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

try:
    from .health import BUSY, probe_file
    from .procfs import group_zombies
except ImportError:  # run as a script in the image, beside health.py and procfs.py
    from health import BUSY, probe_file  # type: ignore[no-redef]
    from procfs import group_zombies  # type: ignore[no-redef]

RESTART_EXIT = 75  # EX_TEMPFAIL: the container should be started again
RESTART_LINE = "tritonize-watchdog: restarting"
POLL_S = 0.5  # how often the process group is read
SETTLE_S = 1.0  # a zombie still there this much later is a dead process, not one being reaped
KILL_AFTER_S = 5.0  # SIGTERM to SIGKILL when the watchdog stops a failed Triton (a dead stub makes it wait 30 s)
DRAIN_S = 25.0  # the longest SIGTERM waits for gRPC clients to leave (compose's grace period is 40 s, K8s's 30 s)
ESTABLISHED = "01"  # a TCP connection's state in /proc/net/tcp
OPERATOR_LIBRARY = "libortextensions.so"  # spec.GRAPH_LIBRARY_FILE (this file is served alone: no import of spec)


def say(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {message}", flush=True)


def flags_of(command: list[str]) -> dict[str, str]:
    """The command's `--name=value` flags, by name: Triton's own settings (ports differ under host networking)."""
    return dict(arg[2:].split("=", 1) for arg in command if arg.startswith("--") and "=" in arg)


def http_url(command: list[str]) -> str:
    """Where the command's Triton answers HTTP."""
    flags = flags_of(command)
    address = flags.get("http-address", "127.0.0.1")
    address = "127.0.0.1" if address in ("0.0.0.0", "::", "") else address
    return f"http://{address}:{flags.get('http-port', '8000')}"


def grpc_port(command: list[str]) -> int:
    return int(flags_of(command).get("grpc-port", "8001"))


def grpc_connections(port: int) -> int:
    """Established TCP connections to Triton's gRPC port in this network namespace (/proc/net/tcp, tcp6)."""
    found = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == ESTABLISHED and int(fields[1].rsplit(":", 1)[1], 16) == port:
                found += 1
    return found


def drain(port: int, timeout_s: float) -> float:
    """Wait (at most timeout_s) until no gRPC client holds a connection to Triton; the seconds spent.

    On SIGTERM Triton 2.51 waits for its open HTTP connections, but not for gRPC calls, and refuses at once a
    request between two steps of an ensemble. The HTTP API (Triton's HTTP routes included) reaches Triton over
    gRPC and, stopped at the same time, answers what it holds before it closes its channel: Triton is signalled
    once that channel, and any other client's, has closed."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s and grpc_connections(port):
        time.sleep(0.1)
    return time.monotonic() - start


def operator_library_path(command: list[str], environ: dict[str, str]) -> dict[str, str]:
    """`environ` with LD_LIBRARY_PATH led by each model folder of the command's repositories (its
    --model-repository flags) that holds OPERATOR_LIBRARY; unchanged where none does."""
    repositories = [arg.split("=", 1)[1] for arg in command if arg.startswith("--model-repository=")]
    folders = sorted({os.path.join(root, model) for root in repositories if os.path.isdir(root)
                      for model in os.listdir(root) if os.path.isfile(os.path.join(root, model, OPERATOR_LIBRARY))})
    if not folders:
        return dict(environ)
    paths = [*folders, *(p for p in environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p)]
    return {**environ, "LD_LIBRARY_PATH": os.pathsep.join(paths)}


class Watchdog:
    """Triton as a child process, checked until it fails its health check `retries` times in a row."""

    def __init__(self, command: list[str], health_file: str, interval_s: float, retries: int, timeout_s: float,
                 start_period_s: float):
        self.command = command
        self.health_file = health_file
        self.interval_s = interval_s
        self.retries = retries
        self.timeout_s = timeout_s
        self.start_period_s = start_period_s
        self.url = http_url(command)
        self.stopping = threading.Event()
        self.child: subprocess.Popen | None = None

    def forward(self, signum: int, _frame: object) -> None:
        """SIGTERM (or SIGINT) to Triton once it has drained, from a thread: the handler returns at once."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        threading.Thread(target=self.drain_then_send, args=(signum,), daemon=True).start()

    def drain_then_send(self, signum: int) -> None:
        drained = drain(grpc_port(self.command), DRAIN_S)
        say(f"tritonize-watchdog: drained in {drained:.1f}s (gRPC clients gone), stopping Triton")
        if self.child and self.child.poll() is None:
            self.child.send_signal(signum)

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.forward)
        signal.signal(signal.SIGINT, self.forward)
        self.child = subprocess.Popen(self.command, start_new_session=True,
                                      env=operator_library_path(self.command, dict(os.environ)))
        started, passed, failures = time.monotonic(), False, 0
        next_check, suspects = started + self.interval_s, set()
        while not self.stopping.wait(POLL_S):
            if self.child.poll() is not None:
                break
            dead = set(group_zombies(self.child.pid))
            if dead & suspects:
                return self.restart(f"process {min(dead & suspects)} of Triton's group died (a dead stub)")
            if dead:
                suspects = dead
                self.stopping.wait(SETTLE_S - POLL_S)
                continue
            if time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + self.interval_s
            try:
                with open(self.health_file, "rb"):
                    pass
            except OSError:
                continue  # a repository without a health check: Triton alone decides
            result = probe_file(self.url, self.health_file, self.timeout_s)
            if self.stopping.is_set() or self.child.poll() is not None:
                break
            if result.ok or result.code == BUSY:
                passed, failures = passed or result.ok, 0
                continue
            if not passed and time.monotonic() - started < self.start_period_s:
                continue
            failures += 1
            say(f"tritonize-watchdog: health check failed ({failures}/{self.retries}): {result.detail[:200]}")
            if failures >= self.retries:
                return self.restart(f"the health check failed {failures} times in a row")
        code = self.child.wait()
        return code if code >= 0 else 128 - code

    def restart(self, why: str) -> int:
        """Stop Triton (SIGTERM, SIGKILL after KILL_AFTER_S) and end, for the restart policy to start afresh."""
        say(f"{RESTART_LINE}: {why}")
        self.end_child()
        return RESTART_EXIT

    def end_child(self) -> None:
        assert self.child is not None
        self.child.terminate()
        try:
            self.child.wait(KILL_AFTER_S)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child.pid, signal.SIGKILL)  # its stubs, whatever state they are in


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--file", required=True, help="the repository's health.json")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between checks (default: %(default)s)")
    parser.add_argument("--retries", type=int, default=3, help="failures in a row that end Triton (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=8.0, help="seconds per check (default: %(default)s)")
    parser.add_argument("--start-period", type=float, default=300.0,
                        help="seconds in which failures before a first success do not count (default: %(default)s)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- tritonserver ...")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command to run (give it after --)")
    return Watchdog(command, args.file, args.interval, args.retries, args.timeout, args.start_period).run()


if __name__ == "__main__":
    sys.exit(main())
