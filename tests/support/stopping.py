"""Servers a fixture is done with, stopped while the next tests run.

A local Triton 2.51 takes 2-3 s to exit after `down` (the Python backend waits a second on each stub it unloads,
and Triton looks at its models once a second until none is left); a fixture's teardown that waits for that waits
for nothing it checks. `stop_later` runs each `down` on a thread of its own; the session waits for all of them
at its end (tests/conftest.py), and fails there if one did not stop. A test about stopping calls `down` itself.
"""

from __future__ import annotations

import contextlib
import threading

STOP_WAIT_S = 120.0  # longer than any `down`: the drain and Triton's 30 s exit timeout

_stops: list[tuple[str, threading.Thread, list[BaseException]]] = []


def stop_later(*runtimes) -> None:
    """`down` each runtime on a thread of its own."""
    for runtime in runtimes:
        errors: list[BaseException] = []
        thread = threading.Thread(target=_down, args=(runtime, errors), name=f"stop {runtime.directory}", daemon=True)
        thread.start()
        _stops.append((str(runtime.directory), thread, errors))


def _down(runtime, errors: list[BaseException]) -> None:
    try:
        runtime.down()
    except BaseException as exc:  # noqa: BLE001 - said when the session ends
        errors.append(exc)


def wait_for_stops(timeout_s: float = STOP_WAIT_S) -> list[str]:
    """Wait for every stop begun; what went wrong, one line per server."""
    problems = []
    while _stops:
        name, thread, errors = _stops.pop()
        thread.join(timeout_s)
        if thread.is_alive():
            problems.append(f"{name}: still stopping after {timeout_s:.0f} s")
        problems += [f"{name}: {exc!r}" for exc in errors]
    return problems


@contextlib.contextmanager
def serving(runtime):
    """`with serving(LocalRuntime(...)) as endpoints:` the server up, and stopped later once the block is done."""
    endpoints = runtime.up()  # a server that fails to start is stopped by up itself
    try:
        yield endpoints
    finally:
        stop_later(runtime)
