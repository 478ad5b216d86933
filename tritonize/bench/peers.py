"""Run a peer (a server Triton is compared against) as a child process on a free loopback port, and stop it after."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from ..errors import TritonizeError
from ..paths import child_pythonpath
from ..runtime.base import http_get
from ..runtime.machine import free_ports

PEERS = {
    "doc": ("HF doc server", False),
    "doc-batched": ("HF doc server, batching", True),
}
START_TIMEOUT_S = 180.0


class ChildServer:
    """`with server as url:` runs `command(port)` until the block ends; ready once GET `health` answers 200.

    One lifecycle for every peer, so each is started, waited for and
    stopped the same way, and its log kept in one file.
    """

    label = "the peer server"
    health = "/health"

    def __init__(self, log_file: Path, host: str = "127.0.0.1"):
        self.log_file, self.host = Path(log_file), host
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def command(self, port: int) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    def cwd(self) -> Path | None:
        return None

    def __enter__(self) -> str:
        port = free_ports(1, self.host)[0]
        self.url = f"http://{self.host}:{port}"
        cmd = self.command(port)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         env=self.env(), cwd=self.cwd())
        try:
            self._wait()
        except BaseException:
            self.stop()
            raise
        return self.url

    def _wait(self) -> None:
        start = time.monotonic()
        while time.monotonic() - start < START_TIMEOUT_S:
            if self.proc is not None and self.proc.poll() is not None:
                raise TritonizeError(f"{self.label} exited with code {self.proc.returncode}:\n{self.log_tail()}")
            if http_get(f"{self.url}{self.health}", timeout=1.0)[0] == 200:
                return
            time.sleep(0.25)
        raise TritonizeError(f"{self.label} was not ready after {START_TIMEOUT_S:.0f}s", hint=f"read {self.log_file}")

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None


class PeerProcess(ChildServer):
    """`with PeerProcess(folder, batch) as url:` serves the model at url until the block ends."""

    def __init__(self, model_folder: str, batch: bool, log_file: Path, threads: int = 0, host: str = "127.0.0.1"):
        super().__init__(log_file, host)
        self.model_folder, self.batch, self.threads = model_folder, batch, threads

    def command(self, port: int) -> list[str]:
        cmd = [sys.executable, "-m", "tritonize.bench.peer_server", "--model", self.model_folder,
               "--host", self.host, "--port", str(port)]
        if self.batch:
            cmd.append("--batch")
        if self.threads:
            cmd += ["--threads", str(self.threads)]
        return cmd

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": child_pythonpath()}


def ask(url: str, row: tuple[str, ...], timeout_s: float = 60.0) -> dict:
    """One row's answer from the peer (the body as the load generator sends it)."""
    body = row[0] if len(row) == 1 else json.dumps(list(row), ensure_ascii=False)
    request = urllib.request.Request(url.rstrip("/") + "/", data=body.encode("utf-8"), method="POST")
    with urllib.request.urlopen(request, timeout=timeout_s) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def counters(url: str) -> dict:
    """The peer's work counters (requests, batches, real and padded tokens)."""
    with urllib.request.urlopen(f"{url}/stats", timeout=5.0) as resp:  # noqa: S310 - loopback
        return json.loads(resp.read())


def counters_delta(before: dict, after: dict) -> dict:
    keys = ("requests", "batches", "real_tokens", "computed_tokens")
    d = {k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in keys}
    d["avg_batch"] = round(d["requests"] / d["batches"], 2) if d["batches"] else 0.0
    d["padding_waste"] = round((d["computed_tokens"] - d["real_tokens"]) / d["real_tokens"], 4) if d["real_tokens"] else 0.0
    return d
