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
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import TritonizeError
from .state import DEFAULT_PORT

HEALTH_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class ApiOptions:
    """How `deploy.py local up` runs the API beside the server (None there: no API)."""

    port: int = DEFAULT_PORT
    key_file: Path | None = None  # require `Authorization: Bearer <the file's key>`


@dataclass
class ApiProcess:
    repository: Path
    grpc_url: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    key_file: Path | None = None
    log_file: Path | None = None
    extra: tuple[str, ...] = ()
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "tritonize.cli", "api", "--repository", str(self.repository),
               "--grpc-url", self.grpc_url, "--host", self.host, "--port", str(self.port), *self.extra]
        return cmd + (["--api-key-file", str(self.key_file)] if self.key_file else [])

    def start(self) -> str:
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # the child imports this package from where this one did
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
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
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise TritonizeError(f"the API exited with code {self.proc.returncode} before it was healthy",
                                     hint=f"see {self.log_file}" if self.log_file else "run `tritonize api` by hand")
            code, last = health(self.url)
            if code == 200:
                return
            time.sleep(0.2)
        self.stop()
        raise TritonizeError(f"the API at {self.url} was not healthy within {timeout_s:.0f}s ({last})")

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
