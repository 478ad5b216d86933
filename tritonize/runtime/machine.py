"""This machine's ports, processes and server logs: helpers shared by the runtimes, the benchmark and the tests.

Everything here reads /proc or binds sockets on this machine; nothing here knows about Triton's configuration.
(The API as a child process is api/child.py.)
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from pathlib import Path

from ..serving.procfs import group, group_zombies, stat_fields  # noqa: F401 - group_zombies: the supervisor's

SHOWN_LOG_LINES = 40
MAX_LINE = 300  # error lines embed whole tracebacks; the model table shows them readably
# Printed by Triton on any machine without a GPU; never the cause of a failure.
NOISE = ("CUDA driver", "NVML", "DCGM", "CudaDriverHelper", "GPU metrics", "Pinned memory", "CUDA memory pool")
ERROR_MARKERS = ("error", "failed", "unavailable", "traceback", "exception", "already in use", "not found")
ADDRESS_IN_USE = ("already in use", "address in use")  # how a server's log says a port was taken


def join_path(first: str, rest: str | None) -> str:
    return f"{first}{os.pathsep}{rest}" if rest else first


# -- ports ----------------------------------------------------------------


def _family(host: str) -> int:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


_handed_out: set[tuple[str, int]] = set()  # ports this process has handed out: never handed out twice
_handing_out = threading.Lock()


def free_ports(n: int = 3, host: str = "127.0.0.1") -> list[int]:
    """n distinct ports that nothing listens on right now (for tests and benchmarks).

    A port is closed again before it is used, so the kernel may offer it to the next call; a port this process
    has already handed out is skipped, or two servers started one after the other could be given the same one.
    """
    ports: list[int] = []
    with _handing_out, contextlib.ExitStack() as held:
        while len(ports) < n:
            s = held.enter_context(socket.socket(_family(host), socket.SOCK_STREAM))  # open until all n are chosen
            s.bind((host, 0))
            port = s.getsockname()[1]
            if (host, port) not in _handed_out:
                ports.append(port)
        _handed_out.update((host, p) for p in ports)
        return ports


def reach_host(host: str) -> str:
    """The address clients use: loopback when a server binds every interface."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def loopback(host: str) -> str:
    """Where a port that must stay on this machine binds (Triton's own HTTP port, which the API's front serves:
    docs/reliability.md): the host itself where it is a loopback address, else 127.0.0.1."""
    return host if host in ("localhost", "::1") or host.startswith("127.") else "127.0.0.1"


def url_host(host: str) -> str:
    """A host as it goes into a URL or a host:port pair (IPv6 in brackets)."""
    return f"[{host}]" if ":" in host else host


def port_in_use(host: str, port: int) -> bool:
    """True when something listens on host:port (TIME_WAIT leftovers do not count)."""
    bind_host = "" if host in ("0.0.0.0", "::") else host
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind_host, port))
        except OSError:
            return True
    return False


# -- processes ------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """The process start time from /proc, to tell a live server from a reused PID."""
    try:
        return int(stat_fields(Path(f"/proc/{pid}/stat"))[19])
    except OSError:
        return None


def is_zombie(pid: int) -> bool:
    try:
        return stat_fields(Path(f"/proc/{pid}/stat"))[0] == "Z"
    except OSError:
        return False


def group_processes(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group: the server and its backend stubs."""
    return [pid for pid, state in group(pgid) if state != "Z"]


def exited(pid: int) -> bool:
    """True once every thread of a process has gone. A killed process's first thread shows as a zombie while its
    other threads still exit and hold its sockets: a killed server's ports are free only after this."""
    try:
        return [t.name for t in Path(f"/proc/{pid}/task").iterdir()] in ([], [str(pid)]) and is_zombie(pid)
    except OSError:
        return True


def group_exited(pgid: int) -> bool:
    """True once every process of a group has exited, every thread of each (zombies left to reap count)."""
    return all(state == "Z" and exited(pid) for pid, state in group(pgid)) and exited(pgid)


def reap(pid: int) -> None:
    """Collect the exit status if the server is our own child (no zombie left)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


# -- log reading ----------------------------------------------------------


def relevant_log_lines(text: str, limit: int = SHOWN_LOG_LINES) -> list[str]:
    """The lines that explain a failure: error lines and the model status table's failing rows."""
    lines = text.splitlines()
    keep: list[str] = []
    in_table_row = False
    for line in lines:
        if any(noise in line for noise in NOISE):
            continue
        lowered = line.lower()
        if line.startswith("|"):
            # Model table rows wrap long tracebacks across lines; keep the whole failing row.
            if "UNAVAILABLE" in line:
                in_table_row = True
            elif line.split("|")[1].strip():
                in_table_row = False
            if in_table_row:
                keep.append(line.rstrip())
            continue
        in_table_row = False
        if line[:1] == "E" and line[1:5].isdigit() or any(m in lowered for m in ERROR_MARKERS):
            line = line.rstrip()
            keep.append(line if len(line) <= MAX_LINE else line[:MAX_LINE] + " ...")
    if len(keep) > limit:
        keep = keep[:limit] + [f"... ({len(keep) - limit} more lines in the log)"]
    return keep


def tail_lines(path: Path, n: int | None) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    if n is None:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-n:]) if n > 0 else ""


def error_lines(log: str, limit: int = 15) -> list[str]:
    """Triton's error lines (`E0101 12:00:00.000 ...`) and Python exceptions from a container's log."""
    picked = [line for line in log.splitlines() if re.match(r"^E\d{4} ", line) or re.search(r"\w+Error: ", line)]
    return picked[-limit:]
