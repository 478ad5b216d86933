"""Where the CPU goes during a measurement: the server, each step's stub, the client.

On a machine with few cores every process competes for them, so each
millisecond of CPU a request costs outside the model is throughput lost.
Read from /proc for a local server (its process group: tritonserver plus
one Python-backend stub per model instance), so it covers `--start-local`
runs; a container's processes are not visible from here.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..runtime.process import group_processes

SERVER = "tritonserver"


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
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


def group_cpu_s(server_pid: int) -> dict[str, float]:
    """CPU seconds so far of every process in the server's group (it leads its own), summed per label."""
    totals: dict[str, float] = {}
    for pid in group_processes(server_pid):
        label = _label(pid, server_pid)
        if label:
            try:
                totals[label] = totals.get(label, 0.0) + _on_cpu_s(pid)
            except OSError:  # exited meanwhile
                continue
    return totals


@dataclass
class CpuMeter:
    """Snapshots of a local server's group; `finish` turns the difference into ms of CPU per request."""

    server_pid: int
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)
    _start: dict[str, float] = field(default_factory=dict)
    _t0: float = 0.0

    def start(self) -> None:
        self._start, self._t0 = group_cpu_s(self.server_pid), time.perf_counter()

    def finish(self, completed: int, client_cpu_s: float, wall_s: float | None = None) -> dict:
        wall = wall_s or (time.perf_counter() - self._t0)
        end = group_cpu_s(self.server_pid)
        used = {k: max(0.0, v - self._start.get(k, 0.0)) for k, v in end.items()}
        used["client"] = client_cpu_s
        per_request = {k: round(1e3 * v / completed, 3) for k, v in used.items()} if completed else {}
        busy = sum(used.values())
        return {
            "ms_per_request": per_request,
            "total_ms_per_request": round(1e3 * busy / completed, 3) if completed else None,
            # Of all cores over the measurement: what no measured process used (other work, or waiting).
            "idle_pct": round(100.0 * max(0.0, 1.0 - busy / (wall * self.cores)), 1) if wall > 0 else None,
            "cores": self.cores,
        }
