"""The API as a child process: started beside a Triton, healthy before it is used, stopped with it.

`deploy.py local up`, `tritonize bench --protocols api` and the tests run it this way, so each measures and
serves what `tritonize api` runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TritonizeError
from ..paths import child_pythonpath
from .state import DEFAULT_PORT

HEALTH_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ApiOptions:
    """How `deploy.py local up` runs the API beside the server (None there: no API)."""

    port: int = DEFAULT_PORT
    key_file: Path | None = None  # require `Authorization: Bearer <the file's key>`
    workers: int | None = None  # processes on the port (`tritonize api --workers`; None: the API's default)


@dataclass
class ApiProcess:
    repository: Path
    grpc_url: str
    http_url: str | None = None  # Triton's HTTP endpoint, where the routes' inferences go (`--http-url`)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    key_file: Path | None = None
    workers: int | None = None  # None: the API's default ($TRITONIZE_API_WORKERS, the repository's tuned count, 1)
    log_file: Path | None = None
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tritonize.cli", "api", "--repository", str(self.repository),
               "--grpc-url", self.grpc_url, *(["--http-url", self.http_url] if self.http_url else []),
               "--host", self.host, "--port", str(self.port),
               *(["--workers", str(self.workers)] if self.workers is not None else []), *self.extra]
        return cmd + (["--api-key-file", str(self.key_file)] if self.key_file else [])

    def start(self) -> str:
        env = {**os.environ, "PYTHONPATH": child_pythonpath()}
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
        try:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         env=env, start_new_session=True)
        finally:
            if self.log_file:
                out.close()
        self.wait_healthy()
        return self.url

    def wait_healthy(self, timeout_s: float = HEALTH_TIMEOUT_S) -> None:
        try:
            wait_healthy(self.url, lambda: self.proc is None or self.proc.poll() is None, timeout_s, self.log_file)
        except TritonizeError:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        self.proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_healthy(url: str, alive: Callable[[], bool], timeout_s: float, log_file: Path | None) -> float:
    """Poll /health until it answers 200 (the seconds it took); one clear error when the API exits first or
    does not answer in time, with the last line of its log."""
    start = time.monotonic()
    while True:
        code, detail = health(url)
        if code == 200:
            return time.monotonic() - start
        if not alive() or time.monotonic() - start > timeout_s:
            why = detail if alive() else "it exited"
            tail = _log_tail(log_file)
            raise TritonizeError(f"the API at {url} did not answer /health within {timeout_s:.0f}s ({why})"
                                 + (f": {tail}" if tail else ""),
                                 hint=f"see {log_file}" if log_file else "run `tritonize api` by hand")
        time.sleep(0.2)


def _log_tail(log_file: Path | None) -> str:
    """The last non-empty line of the API's log, or ""."""
    try:
        lines = [line for line in Path(log_file).read_text(errors="replace").splitlines() if line.strip()]
    except (OSError, TypeError):
        return ""
    return lines[-1] if lines else ""


def health(url: str, timeout_s: float = 10.0) -> tuple[int, str]:
    """(status, detail) of GET /health: a real inference through every served model."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as resp:  # noqa: S310 - our own address
            return resp.status, "ok"
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read()).get("error", "")
        except ValueError:
            return exc.code, ""
    except OSError as exc:
        return 0, str(exc)
