"""Where the CPU goes during a measurement: the server, each step's stub, the HTTP API, the client.

On a machine with few cores every process competes for them, so each
millisecond of CPU a request costs outside the model is throughput lost.
Read from /proc for a local server (its process group: tritonserver plus
one Python-backend stub per model instance), so it covers `--start-local`
runs; a container's processes are not visible from here. A process outside
that group that serves the same requests (the HTTP API in front of the
server) is watched by its own process group.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.machine import group_processes

SERVER = "tritonserver"
API = "tritonize api"  # the HTTP API's process group, where the load goes through it
CLIENT = "client"  # the load generator (this process)
# Of the server's CPU, the model step's where the native onnxruntime backend runs it in the server process.
NATIVE_MODEL = "of it the model"
# Of a process's CPU, its threads that run nicer than normal: the fused step's graph (serving/fused_step.py,
# GRAPH_NICE). What a request costs before it is admitted or refused runs at normal priority.
NICER = "of it nicer threads"


def _label(pid: int, server_pid: int) -> str | None:
    """tritonserver, or the model a stub serves (its model.py's model directory)."""
    if pid == server_pid:
        return SERVER
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    if len(argv) > 1 and argv[0].endswith(b"triton_python_backend_stub"):
        return Path(argv[1].decode(errors="replace")).parent.parent.name
    return Path(argv[0].decode(errors="replace")).name or None


def _on_cpu_s(pid: int) -> float:
    """Nanosecond-resolution time on a CPU of every live thread (clock ticks are too coarse for short runs)."""
    return sum(thread_cpu_s(pid).values())


def _nicer_cpu_s(pid: int) -> float:
    """CPU seconds so far of the live threads of one process that run nicer than normal."""
    total = 0.0
    for tid, used in thread_cpu_s(pid).items():
        try:
            nice = int(Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[16])
        except (OSError, ValueError, IndexError):
            continue
        total += used if nice > 0 else 0.0
    return total


def group_cpu_s(server_pid: int, nicer: bool = False) -> dict[str, float]:
    """CPU seconds so far of every process in the server's group (it leads its own), summed per label; with
    `nicer`, only its threads that run nicer than normal."""
    totals: dict[str, float] = {}
    for pid in group_processes(server_pid):
        label = _label(pid, server_pid)
        if label:
            try:
                totals[label] = totals.get(label, 0.0) + (_nicer_cpu_s(pid) if nicer else _on_cpu_s(pid))
            except OSError:  # exited meanwhile
                continue
    return totals


def process_group_cpu_s(pgid: int) -> float:
    """CPU seconds so far of every live process of a group."""
    total = 0.0
    for pid in group_processes(pgid):
        try:
            total += _on_cpu_s(pid)
        except OSError:  # exited meanwhile
            continue
    return total


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds so far of each live thread of one process."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out[int(task.name)] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    return out


@dataclass
class CpuMeter:
    """Snapshots of a local server's group; `finish` turns the difference into ms of CPU per request.

    model_threads > 0: the native onnxruntime backend runs the model step inside the server, one thread per
    instance (one onnxruntime thread each: spec.CPU_INTRA_OP_THREADS); the server's busiest that many threads over
    the measurement are reported as the model's share of the server (every other thread of the server does far
    less: gRPC, HTTP, the ensemble's scheduling)."""

    server_pid: int | None  # None: only the watched groups (a server that is not Triton)
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    model_threads: int = 0
    # Other process groups that serve the measured requests, by label (the HTTP API: `watch(API, pid)`).
    watched: dict[str, int] = field(default_factory=dict)
    _start: dict[str, float] = field(default_factory=dict)
    _start_nicer: dict[str, float] = field(default_factory=dict)
    _threads: dict[int, float] = field(default_factory=dict)
    _t0: float = 0.0

    def watch(self, label: str, pgid: int) -> None:
        self.watched[label] = pgid

    def unwatch(self, label: str) -> None:
        self.watched.pop(label, None)

    def _read(self) -> dict[str, float]:
        totals = group_cpu_s(self.server_pid) if self.server_pid else {}
        for label, pgid in self.watched.items():
            totals[label] = totals.get(label, 0.0) + process_group_cpu_s(pgid)
        return totals

    def start(self) -> None:
        self._start_nicer = group_cpu_s(self.server_pid, nicer=True) if self.server_pid else {}
        self._start, self._t0 = self._read(), time.perf_counter()
        self._threads = thread_cpu_s(self.server_pid) if self.model_threads else {}

    def finish(self, completed: int, client_cpu_s: float, wall_s: float | None = None) -> dict:
        """Call it as soon as the load stops: what the server does after (statistics, metrics) is not the requests'."""
        wall = wall_s or (time.perf_counter() - self._t0)
        end = self._read()
        nicer = {k: v - self._start_nicer.get(k, 0.0)
                 for k, v in (group_cpu_s(self.server_pid, nicer=True) if self.server_pid else {}).items()}
        used = {k: max(0.0, v - self._start.get(k, 0.0)) for k, v in end.items()}
        used[CLIENT] = client_cpu_s
        per_request = {k: round(1e3 * v / completed, 3) for k, v in used.items()} if completed else {}
        busy = sum(used.values())
        if self.model_threads and completed:
            grown = sorted((v - self._threads.get(t, 0.0) for t, v in thread_cpu_s(self.server_pid).items()),
                           reverse=True)
            per_request[NATIVE_MODEL] = round(1e3 * sum(grown[: self.model_threads]) / completed, 3)
        return {
            "ms_per_request": per_request,
            # The same, unrounded: CPU seconds by process over the measured requests (NATIVE_MODEL is part of SERVER).
            "cpu_s": {k: round(v, 6) for k, v in used.items()},
            "completed": completed,
            NICER: {k: round(1e3 * max(0.0, v) / completed, 3) for k, v in nicer.items() if v > 0} if completed else {},
            "total_ms_per_request": round(1e3 * busy / completed, 3) if completed else None,
            # Of all cores over the measurement: what no measured process used (other work, or waiting).
            "idle_pct": round(100.0 * max(0.0, 1.0 - busy / (wall * self.cores)), 1) if wall > 0 else None,
            "cores": self.cores,
        }
