"""Processes of a process group, read from /proc: the live ones, and the dead ones nobody reaped.

Triton 2.51 never reaps a Python-backend stub that was killed, so a dead stub is a zombie in the server's
process group. Standard library only: the local runtime and supervisor read it (runtime/machine.py), and
the serving image's entrypoint (watchdog.py) carries it beside health.py.
"""

from __future__ import annotations

from pathlib import Path


def stat_fields(stat: Path) -> list[str]:
    """A /proc stat file's fields after the command name (which may hold spaces and parentheses): the first is
    proc(5)'s field 3, the state. Raises OSError for a process or thread that is gone."""
    return stat.read_text().rsplit(")", 1)[1].split()


def group(pgid: int) -> list[tuple[int, str]]:
    """(pid, state) of every process in a process group."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = stat_fields(entry / "stat")
        except OSError:
            continue
        if int(fields[2]) == pgid:
            found.append((int(entry.name), fields[0]))
    return sorted(found)


def group_zombies(pgid: int) -> list[int]:
    """Dead processes of a group that their parent has not reaped (a killed Python-backend stub)."""
    return [pid for pid, state in group(pgid) if state == "Z"]
