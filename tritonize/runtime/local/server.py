"""The local server process: its command line, its backend directory, its environment, starting it until it is
ready and stopping its process group (stubs included). What runs beside it is companions.py's."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape

from ...console import err
from ...errors import TritonizeError
from ...spec import CONFIG_FILE, CONFIGS_DIR, GRAPH_LIBRARY_FILE
from .. import machine, native_backend
from ..base import METRICS_CONFIG, Endpoints, ServerOptions, wait_ready
from ..instance import ADMIN_HEADER, LOG_FILE, STUB_NAME, Instance, admin_key, dead_stubs, forget, spawn, start_failure, stop
from .wheel import TritonInstall, server_library

# APIs that change the server or read beyond inference (log settings, traces, the repository's load/unload,
# shared-memory registration): restricted to clients that send ADMIN_HEADER with the instance's key.
RESTRICTED_APIS = ("logging", "trace", "model-repository", "shared-memory")


def needs_native(repository: Path, config_name: str | None) -> bool:
    """Whether a server of `repository` selecting `config_name` (None: each model's config.pbtxt) loads a config
    on Triton's onnxruntime backend: every production config of a model step, and a model without a config of
    that name (Triton then loads its config.pbtxt: a repository that tokenizes in its graphs has no fused one)."""
    if config_name is None:
        return True
    for config in Path(repository).glob(f"*/{CONFIG_FILE}"):
        if not (config.parent / CONFIGS_DIR / f"{config_name}.pbtxt").is_file() and \
                'platform: "onnxruntime_onnx"' in config.read_text(encoding="utf-8"):
            return True
    return False


def operator_library_of(repository: Path) -> Path | None:
    """The operator library the repository's tokenizer graphs ship (each such step's folder holds a copy), or None;
    copies that differ are refused, as a server finds one by its name."""
    copies = sorted(Path(repository).glob(f"*/{GRAPH_LIBRARY_FILE}"))
    if len({c.read_bytes() for c in copies}) > 1:
        raise TritonizeError(f"the models of {repository} carry different {GRAPH_LIBRARY_FILE} ({copies[0].parent.name}, "
                             f"{copies[-1].parent.name}), and a server loads one", hint="generate one of them again")
    return copies[0] if copies else None


class TritonProcess:
    """One tritonserver in its own process group, in the instance directory `directory`."""

    def __init__(self, options: ServerOptions, directory: Path, config_name: str | None,
                 onnxruntime_backend: Path | None, say: Callable[[str], None], quiet: bool):
        self.options = options
        self.directory = directory
        self.config_name = config_name  # None: each step's config.pbtxt, on the native onnxruntime backend
        self.onnxruntime_backend = onnxruntime_backend  # None: the one `make backend` built
        self.say = say
        self.quiet = quiet
        self.proc: subprocess.Popen | None = None

    @property
    def log_file(self) -> Path:
        return self.directory / LOG_FILE

    def command(self, install: TritonInstall, backend_dir: Path) -> list[str]:
        o = self.options
        key = admin_key(self.directory)
        cmd = [
            str(install.server),
            f"--model-repository={Path(o.repository).resolve()}",
            f"--backend-directory={backend_dir}",
            f"--http-address={machine.loopback(o.host)}",  # Triton's own HTTP: the API's front serves it outside
            f"--grpc-address={o.host}",
            f"--metrics-address={o.host}",
            f"--http-port={o.http_port}",
            f"--grpc-port={o.grpc_port}",
            f"--metrics-port={o.metrics_port}",
            f"--model-control-mode={o.model_control}",
            *(f"--metrics-config={setting}" for setting in METRICS_CONFIG),
            f"--http-restricted-api={','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}={key}",
            f"--grpc-restricted-protocol={','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}={key}",
        ]
        if self.config_name:
            cmd.append(f"--model-config-name={self.config_name}")
        if o.model_control == "explicit":
            cmd.append("--load-model=*")  # serve the whole repository, as in mode "none"
        if o.log_verbose:
            cmd.append(f"--log-verbose={o.log_verbose}")
        return cmd

    def prepare_backend(self, install: TritonInstall) -> Path:
        """A backend directory with the Python backend and the stub for this interpreter, and where a config it
        serves runs on onnxruntime, the native onnxruntime backend, with the operator library the repository's
        tokenizer graphs name beside it (found there through libonnxruntime's RUNPATH, $ORIGIN)."""
        repository = Path(self.options.repository)
        native = native_backend.find(self.onnxruntime_backend) if needs_native(repository, self.config_name) else None
        backends = self.directory / "backends"
        target = backends / "python"
        shutil.rmtree(backends, ignore_errors=True)
        target.mkdir(parents=True)
        for item in install.python_backend.iterdir():
            if item.is_file():
                shutil.copy2(item, target / item.name)
        shutil.copy2(install.stub, target / STUB_NAME)
        if native:
            onnxruntime = native.lay_out(backends / "onnxruntime", server_library(install))
            library = operator_library_of(repository)
            if library is not None:
                shutil.copy2(library, onnxruntime / GRAPH_LIBRARY_FILE)
        return backends

    @staticmethod
    def env(install: TritonInstall) -> dict[str, str]:
        """What the server needs over this environment; recorded, so that a restart sets the same."""
        return {
            "LD_LIBRARY_PATH": machine.join_path(str(install.libs), os.environ.get("LD_LIBRARY_PATH")),
            "PATH": machine.join_path(str(install.python_bin), os.environ.get("PATH")),
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", "1"),
        }

    def start(self, install: TritonInstall) -> Endpoints:
        """Lay out the backends, spawn the server, record it, and wait until it is ready (stopped and forgotten
        again if it never is)."""
        o = self.options
        cmd = self.command(install, self.prepare_backend(install))
        record = Instance(
            pid=0,
            start_ticks=None,
            repository=str(Path(o.repository).resolve()),
            host=o.host,
            reach_host=machine.reach_host(o.host),
            http_port=o.http_port,
            grpc_port=o.grpc_port,
            metrics_port=o.metrics_port,
            command=cmd,
            started_at=0.0,
            env=self.env(install),
            ready_timeout_s=o.timeout_s,
        )
        self.proc, inst = spawn(self.directory, record)
        try:
            self._wait(inst)
        except BaseException:
            self.stop(inst, timeout_s=10.0)
            forget(self.directory)
            raise
        return inst.endpoints

    def _wait(self, inst: Instance) -> None:
        proc = self.proc
        assert proc is not None
        title = f"Starting Triton on {self.options.host}:{inst.http_port}"
        start = time.monotonic()
        status = err.status(f"{title}...") if err.is_terminal and not self.quiet else contextlib.nullcontext()
        last_report = [0.0]

        def on_tick(elapsed: float) -> None:
            if err.is_terminal and not self.quiet:
                room = max(0, err.width - len(title) - 14)
                status.update(f"{title}... {elapsed:.0f}s  [dim]{self._last_log_line(room)}[/]")
            elif elapsed - last_report[0] >= 5.0:
                last_report[0] = elapsed
                self.say(f"  waiting for /v2/health/ready... {elapsed:.0f}s")

        if not (err.is_terminal and not self.quiet):
            self.say(f"{title}...")

        def alive() -> bool:
            if dead_stubs(inst):  # Triton 2.51 never finishes a load whose stub died
                raise TritonizeError("a Python stub died while Triton loaded its models")
            return proc.poll() is None

        try:
            with status:
                wait_ready(inst.endpoints, self.options.timeout_s, alive, on_tick)
        except TritonizeError as exc:
            raise start_failure(self.directory, exc, proc.poll()) from None
        self.say(f"[green]✓[/] {title} [dim]({time.monotonic() - start:.1f}s)[/]")

    def _last_log_line(self, width: int) -> str:
        """What the server is doing now, from its log, for the progress line."""
        for line in reversed(machine.tail_lines(self.log_file, 5).splitlines()):
            text = line.split("] ", 1)[-1].strip().strip('"')
            if text and not any(n in text for n in machine.NOISE):
                return escape(text[:width])
        return ""

    def stop(self, inst: Instance, timeout_s: float) -> None:
        """SIGTERM to the group (Triton drains in-flight requests), SIGKILL after timeout_s (0: at once)."""
        start = time.monotonic()
        proc = self.proc if self.proc and self.proc.pid == inst.pid else None
        stop(inst, timeout_s, proc,
             on_timeout=lambda: self.say(f"[yellow]Triton did not stop within {timeout_s:.0f}s; killing it[/]"))
        self.say(f"[green]✓[/] Triton stopped (pid {inst.pid}) [dim]({time.monotonic() - start:.1f}s)[/]")
        self.proc = None
