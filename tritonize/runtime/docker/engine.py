"""The docker engine: connecting to it (one clear line where there is none), and following a build or pull stream
as progress."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

from ...console import err
from ...errors import TritonizeError



def _engine_address() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


def _short_reason(exc: BaseException) -> str:
    text = str(exc)
    for needle, reason in (
        ("FileNotFoundError", "no socket there"),
        ("No such file or directory", "no socket there"),
        ("PermissionError", "permission denied"),
        ("Permission denied", "permission denied"),
        ("Connection refused", "connection refused"),
        ("timed out", "timed out"),
    ):
        if needle in text:
            return reason
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:120]


def no_engine_error(exc: BaseException) -> TritonizeError:
    reason = _short_reason(exc)
    hint = "run Triton without Docker: python deploy.py local up"
    if reason == "permission denied":
        hint = "add your user to the 'docker' group, or " + hint
    return TritonizeError(f"no Docker engine could be reached at {_engine_address()} ({reason})", hint=hint)


def connect(timeout_s: int = 10, work_timeout_s: int = 600) -> Any:
    """A docker client that has answered a ping; a clear error when there is no engine."""
    import docker
    import requests

    try:
        client = docker.from_env(timeout=timeout_s)
        client.ping()
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        raise no_engine_error(exc) from None
    client.api.timeout = work_timeout_s  # builds and pulls stay quiet for long stretches
    return client


class _Progress:
    """One live status line on a terminal; an occasional plain line otherwise (CI logs)."""

    def __init__(self, title: str, every_s: float = 10.0):
        self.title = title
        self.every_s = every_s
        self._status: Any = None
        self._last_print = 0.0
        self._start = 0.0

    def __enter__(self) -> _Progress:
        self._start = time.perf_counter()
        if err.is_terminal:
            self._status = err.status(f"{self.title}...")
            self._status.__enter__()
        else:
            err.print(f"{self.title}...")
        return self

    def update(self, text: str) -> None:
        if self._status is not None:
            self._status.update(f"{self.title}: {text}")
        elif time.perf_counter() - self._last_print >= self.every_s:
            self._last_print = time.perf_counter()
            err.print(f"  {text}", markup=False, highlight=False)

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        if self._status is not None:
            self._status.__exit__(None, None, None)
        if exc_type is None:
            err.print(f"[green]✓[/] {self.title} [dim]({time.perf_counter() - self._start:.1f}s)[/]")


def _follow(stream: Iterable[dict[str, Any]], progress: _Progress, what: str) -> None:
    """Show a build or pull stream as progress; raise on its first error."""
    layers: dict[str, str] = {}
    for chunk in stream:
        if "error" in chunk:
            detail = str(chunk.get("error", "")).strip().splitlines()[-1:] or [""]
            raise TritonizeError(f"{what} failed: {detail[0]}", hint="check network access to nvcr.io and PyPI")
        if "stream" in chunk:
            line = str(chunk["stream"]).strip()
            if line.startswith("Step ") or line.startswith("Successfully"):
                progress.update(line[:100])
        elif "status" in chunk:
            if "id" in chunk:
                layers[chunk["id"]] = str(chunk["status"])
                done = sum(s in ("Pull complete", "Already exists") for s in layers.values())
                progress.update(f"{done}/{len(layers)} layers")
            else:
                progress.update(str(chunk["status"])[:100])
