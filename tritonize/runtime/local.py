"""`deploy.py local up|down|status|logs`: the tritonserver binary from the nvidia-pytriton wheel.

No Docker and no GPU. The wheel ships Triton 2.51 with its Python backend alone; the server serves either
variant of a repository (`--variant`): the production configs (each step's config.pbtxt, as NVIDIA's container
loads them), with Triton's native onnxruntime backend built from its release sources (native_backend.py) laid
out beside the Python backend, or the fused step (`--model-config-name=fused`, which selects each model's
`configs/fused.pbtxt`: the tokenizer and onnxruntime in one Python-backend model). The server runs in its own
process group, so `down` stops it together with its Python-backend stub processes.

Each server gets an instance directory `<run_dir>/local-<http_port>/` holding
its state (pid, endpoints, repository), its log and its backend
directory, so several servers can run side by side on different ports.

`deploy.py local up` also starts a supervisor beside the server
(supervisor.py): Triton 2.51 neither notices nor recovers a dead Python stub,
so the supervisor reloads the step whose stub died (explicit model control)
or restarts the server (a dead stub without model control, a dead server, a
health check, a tiny inference through the ensemble, that keeps failing).
The two share the instance directory's files and the process-group helpers
(instance.py) and never import each other.

`deploy.py local up --monitoring` also starts a Prometheus that scrapes the
server (monitoring.py), with its state under the same instance directory;
`down` stops it with the server and `status` reports it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape

from ..console import err
from ..errors import TritonizeError
from ..paths import child_pythonpath
from ..repository import variant_config
from ..serving.health import HEALTH_FILE, probe_file
from ..spec import DEFAULT_VARIANT, GRAPH_LIBRARY_ROOT, VARIANT_CONFIGS
from . import native_backend, process, rollout, versions
from .instance import (
    ADMIN_HEADER,
    API_LOG_FILE,
    LOG_FILE,
    STUB_NAME,
    SUPERVISOR_LOG_FILE,
    SUPERVISOR_MODULE,
    SUPERVISOR_STATE_FILE,
    ApiRecord,
    Instance,
    admin_key,
    check_ports,
    dead_stubs,
    forget,
    instance_dir,
    read_api,
    read_instance,
    read_supervisor,
    spawn,
    spawn_api,
    start_failure,
    stop,
    stop_api,
)
from .base import (
    METRICS_CONFIG,
    Endpoints,
    Runtime,
    ServerOptions,
    ServerStatus,
    http_get,
    repository_models,
    drain,
    require_repository,
    wait_ready,
)
from ..api.process import ApiOptions, ApiProcess
from ..api.process import health as api_health
from ..api.process import wait_healthy as wait_api_healthy
from ..api.state import DEFAULT_PORT as DEFAULT_API_PORT
from .monitoring import DEFAULT_PORT as DEFAULT_PROMETHEUS_PORT
from .monitoring import DEFAULT_SCRAPE_INTERVAL_S, FIRST_SCRAPE_S, INSTALL_HINT, LocalPrometheus, MonitoringOptions

DEFAULT_HTTP_PORT = ServerOptions().http_port
# APIs that change the server or read beyond inference (log settings, traces, the repository's load/unload,
# shared-memory registration): restricted to clients that send ADMIN_HEADER with the instance's key.
RESTRICTED_APIS = ("logging", "trace", "model-repository", "shared-memory")
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # what Triton expects before a restricted gRPC protocol's header
DEFAULT_STOP_TIMEOUT_S = 30.0  # Triton's own --exit-timeout-secs default
REPLACED_GRACE_S = 3.0  # SIGTERM to SIGKILL for a drained server that has steps reloaded after a stub died
API_READY_S = 60.0  # the API's /health must answer within this after the server is ready
SUPERVISOR_STOP_S = 60.0  # a supervisor in the middle of a restart ends its try on SIGTERM; SIGKILL after this


# -- where the server comes from ------------------------------------------

# The wheel's layout, in site-packages (the container tests' stand-in image is laid out from it too):
WHEEL_SERVER_DIR = "pytriton/tritonserver"  # bin/tritonserver, backends/python/, caches/, the stubs
WHEEL_LIBS_DIR = "nvidia_pytriton.libs"  # the server's shared libraries (libtritonserver, a libcudart, ...)
WHEEL_STUBS_DIR = "python_backend_stubs"  # <X.Y>/triton_python_backend_stub, one per Python version
WHEEL_SERVER_LIBRARY = "libtritonserver*.so"  # in WHEEL_LIBS_DIR, renamed with a hash by the wheel's build


@dataclass(frozen=True)
class TritonInstall:
    """The server binary, its libraries and the Python backend, as the wheel lays them out."""

    server: Path
    libs: Path
    python_backend: Path
    stub: Path
    python_bin: Path  # first on PATH: how the stub finds this environment's packages


def find_install(tritonserver: Path | None = None) -> TritonInstall:
    """Locate the wheel's server and the stub for the running interpreter."""
    try:
        import pytriton
    except ModuleNotFoundError:
        raise TritonizeError(
            "the local runtime needs the nvidia-pytriton wheel (it ships the tritonserver binary)",
            hint="pip install 'nvidia-pytriton>=0.7'  (or: pip install -e '.[local]')",
        ) from None
    site = Path(pytriton.__file__).resolve().parents[1]
    root = site / WHEEL_SERVER_DIR
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    install = TritonInstall(
        server=Path(tritonserver) if tritonserver else root / "bin" / "tritonserver",
        libs=site / WHEEL_LIBS_DIR,
        python_backend=root / "backends" / "python",
        stub=root / WHEEL_STUBS_DIR / version / STUB_NAME,
        python_bin=Path(sys.prefix) / "bin",
    )
    if not install.server.is_file():
        raise TritonizeError(f"no tritonserver binary at {install.server}", hint="reinstall nvidia-pytriton")
    if not install.stub.is_file():
        raise TritonizeError(
            f"nvidia-pytriton has no Python-backend stub for Python {version}",
            hint="use Python 3.8-3.13 for this environment",
        )
    return install


def missing_libraries(binary: Path, libs: Path) -> list[str]:
    """Shared libraries `binary` cannot find (the stub links the system libpython)."""
    ldd = shutil.which("ldd")
    if ldd is None:
        import ctypes.util

        name = f"python{sys.version_info.major}.{sys.version_info.minor}"
        return [] if ctypes.util.find_library(name) else [f"lib{name}.so.1.0"]
    env = {**os.environ, "LD_LIBRARY_PATH": process.join_path(str(libs), os.environ.get("LD_LIBRARY_PATH"))}
    result = subprocess.run([ldd, str(binary)], capture_output=True, text=True, env=env, check=False)
    return [line.split("=>")[0].strip() for line in result.stdout.splitlines() if "not found" in line]


def server_library(install: TritonInstall) -> Path:
    """The wheel's libtritonserver, which a backend built elsewhere links by its plain name."""
    found = sorted(install.libs.glob(WHEEL_SERVER_LIBRARY))
    if not found:
        raise TritonizeError(f"no {WHEEL_SERVER_LIBRARY} in {install.libs}", hint="reinstall nvidia-pytriton")
    return found[0]


def check_install(install: TritonInstall) -> None:
    missing = missing_libraries(install.stub, install.libs)
    if missing:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise TritonizeError(
            f"the Python-backend stub cannot load {', '.join(missing)}",
            hint=f"install the system Python library: apt-get install libpython{version}",
        )


# -- the runtime ----------------------------------------------------------


class LocalRuntime(Runtime):
    """The wheel's tritonserver as a child process group; also a context manager.

    It serves the repository's `variant`: the production configs (config.pbtxt, on the native onnxruntime
    backend) or the fused step (configs/fused.pbtxt; configs/local.pbtxt in a repository written with that name).

    `with LocalRuntime(ServerOptions(...)) as endpoints:` starts the server,
    and stops it, stubs included, on the way out.
    """

    def __init__(
        self,
        options: ServerOptions,
        tritonserver: Path | None = None,
        quiet: bool = False,
        stop_timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
        supervise: bool = False,
        monitoring: MonitoringOptions | None = None,
        api: ApiOptions | None = None,
        variant: str = DEFAULT_VARIANT,
        onnxruntime_backend: Path | None = None,
    ):
        super().__init__(options)
        self.config_name = variant_config(options.repository, variant)
        self.variant = variant
        self.onnxruntime_backend = onnxruntime_backend  # None: the one `make backend` built
        self.api = api  # None: no HTTP API beside the server
        self.tritonserver = tritonserver
        self.stop_timeout_s = stop_timeout_s
        self.quiet = quiet
        self.supervise = supervise
        self.monitoring = monitoring  # None: `up` starts no Prometheus
        self.directory = instance_dir(options.run_dir, options.http_port).resolve()
        self._proc: subprocess.Popen | None = None

    @property
    def server_pid(self) -> int | None:
        """The running server's PID (it leads its own process group, stubs included)."""
        return self._proc.pid if self._proc else None

    @property
    def log_file(self) -> Path:
        return self.directory / LOG_FILE

    def __enter__(self) -> Endpoints:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        # Only the server this object started (or its supervisor restarted): never another one found in run_dir.
        self._stop_all(self.directory, self.stop_timeout_s)

    # the Prometheus beside it
    def prometheus(self, directory: Path | None = None) -> LocalPrometheus:
        return LocalPrometheus(directory or self.directory, self.monitoring, self.options.host)

    def _report_first_scrape(self, prometheus: LocalPrometheus) -> None:
        """Prometheus runs either way; whether it could scrape the server is said, not raised."""
        every = prometheus.options.scrape_interval_s
        target = prometheus.wait_scraped(FIRST_SCRAPE_S + 2 * every)
        if target and target.get("health") == "up":
            self._say(f"[green]✓[/] Prometheus {prometheus.url} scrapes the metrics port every {every:g}s")
        else:
            why = (target or {}).get("lastError") or "no scrape yet"
            self._say(f"[yellow]Prometheus {prometheus.url} runs, but has not scraped the metrics port: {why}; "
                      f"see {prometheus.log_file}[/]")

    def _stop_prometheus(self, directory: Path) -> None:
        if self.prometheus(directory).stop():
            self._say(f"[green]✓[/] Prometheus stopped (its data stays in {directory / 'prometheus'})")

    def _say(self, message: str) -> None:
        if not self.quiet:
            err.print(message)

    # which server this command is about
    def _instance(self) -> tuple[Path, Instance] | None:
        """The live server for these options; with the default port, the only live one in run_dir."""
        inst = read_instance(self.directory)
        if inst and inst.alive():
            return self.directory, inst
        if self.options.http_port != DEFAULT_HTTP_PORT:
            return None
        live = []
        for d in sorted(Path(self.options.run_dir).glob("local-*")):
            other = read_instance(d)
            if other and other.alive():
                live.append((d.resolve(), other))
        if len(live) > 1:
            ports = ", ".join(str(inst.http_port) for _, inst in live)
            raise TritonizeError(
                f"{len(live)} local Triton servers run from {self.options.run_dir} (HTTP ports {ports})",
                hint="say which one with --http-port",
            )
        return live[0] if live else None

    def command(self, install: TritonInstall, backend_dir: Path) -> list[str]:
        o = self.options
        cmd = [
            str(install.server),
            f"--model-repository={Path(o.repository).resolve()}",
            f"--backend-directory={backend_dir}",
            f"--http-address={o.host}",
            f"--grpc-address={o.host}",
            f"--metrics-address={o.host}",
            f"--http-port={o.http_port}",
            f"--grpc-port={o.grpc_port}",
            f"--metrics-port={o.metrics_port}",
            f"--model-control-mode={o.model_control}",
            *(f"--metrics-config={setting}" for setting in METRICS_CONFIG),
            f"--http-restricted-api={','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}={self.admin_key()}",
            f"--grpc-restricted-protocol={','.join(RESTRICTED_APIS)}:{ADMIN_HEADER}={self.admin_key()}",
        ]
        if self.config_name:
            cmd.append(f"--model-config-name={self.config_name}")
        if o.model_control == "explicit":
            cmd.append("--load-model=*")  # serve the whole repository, as in mode "none"
        if o.log_verbose:
            cmd.append(f"--log-verbose={o.log_verbose}")
        return cmd

    def _prepare_backend(self, install: TritonInstall) -> Path:
        """A backend directory with the Python backend and the stub for this interpreter, and for the production
        configs the native onnxruntime backend."""
        native = native_backend.find(self.onnxruntime_backend) if self.config_name is None else None
        backends = self.directory / "backends"
        target = backends / "python"
        shutil.rmtree(backends, ignore_errors=True)
        target.mkdir(parents=True)
        for item in install.python_backend.iterdir():
            if item.is_file():
                shutil.copy2(item, target / item.name)
        shutil.copy2(install.stub, target / STUB_NAME)
        if native:
            native.lay_out(backends / "onnxruntime", server_library(install))
        self._link_repository()
        return backends

    def _link_repository(self) -> None:
        """models/ in the server's working directory: the repository, where model steps that tokenize inside
        their graph find their operator library (their configs name it by that path, so the repository moves)."""
        link = self.directory / GRAPH_LIBRARY_ROOT
        if link.is_symlink() or link.is_file():
            link.unlink()
        link.symlink_to(Path(self.options.repository).resolve(), target_is_directory=True)

    @staticmethod
    def _env(install: TritonInstall) -> dict[str, str]:
        """What the server needs over this environment; recorded, so that a restart sets the same."""
        return {
            "LD_LIBRARY_PATH": process.join_path(str(install.libs), os.environ.get("LD_LIBRARY_PATH")),
            "PATH": process.join_path(str(install.python_bin), os.environ.get("PATH")),
            "PYTHONDONTWRITEBYTECODE": os.environ.get("PYTHONDONTWRITEBYTECODE", "1"),
        }

    def up(self) -> Endpoints:
        o = self.options
        require_repository(o.repository)
        running = read_instance(self.directory)
        if running and running.alive():
            raise TritonizeError(
                f"a local Triton server is already running (pid {running.pid}, HTTP {running.endpoints.http})",
                hint="stop it with `deploy.py local down`, or pick other ports",
            )
        watcher = read_supervisor(self.directory)
        if watcher and watcher.alive():
            raise TritonizeError(
                f"the supervisor of {self.directory} is {watcher.state} its server ({watcher.last_reason}"
                + (f"; last try: {watcher.last_error}" if watcher.last_error else "") + ")",
                hint="wait for it, or stop both with `deploy.py local down`",
            )
        self._stop_prometheus(self.directory)  # one left by a server of this instance that died
        check_ports(o.host, o.http_port, o.grpc_port, o.metrics_port)
        prometheus = self.prometheus() if self.monitoring else None
        binary = prometheus.check(taken=(o.http_port, o.grpc_port, o.metrics_port)) if prometheus else None
        install = find_install(self.tritonserver)
        check_install(install)

        self.directory.mkdir(parents=True, exist_ok=True)
        backend_dir = self._prepare_backend(install)
        endpoints = self._start(self.command(install, backend_dir), install)
        try:
            api = self._start_api(endpoints) if self.api else None
        except BaseException:
            self.__exit__()  # no half stack: the server goes too
            raise
        if self.supervise:
            self._start_supervisor()
        if prometheus:
            try:
                api_target = api.url.split("//", 1)[1] if api else None
                prometheus.start(f"{process.url_host(endpoints.host)}:{endpoints.metrics_port}", binary, api_target)
            except BaseException:
                self.__exit__()  # no half stack: the server goes too
                raise
            self._report_first_scrape(prometheus)
        return endpoints

    # the HTTP API beside it
    def _start_api(self, endpoints: Endpoints) -> ApiRecord:
        """`tritonize api` on the server's gRPC port, healthy (a real inference through every model) before `up`
        returns; the supervisor starts it again if it exits."""
        assert self.api is not None
        o = self.options
        if process.port_in_use(o.host, self.api.port):
            raise TritonizeError(f"API port {self.api.port} on {o.host} already in use",
                                 hint="choose another with --api-port, or --no-api")
        child = ApiProcess(Path(o.repository).resolve(), endpoints.grpc, host=o.host, port=self.api.port,
                           key_file=self.api.key_file)
        record = spawn_api(self.directory, ApiRecord(0, None, child.url, child.command(),
                                                     {"PYTHONPATH": child_pythonpath()}))
        try:
            took = wait_api_healthy(record.url, record.alive, API_READY_S, self.directory / API_LOG_FILE)
        except TritonizeError as exc:
            stop_api(self.directory)
            raise TritonizeError(exc.message, hint=f"{exc.hint}, or start without it: --no-api") from None
        self._say(f"[green]✓[/] API on {record.url} (OpenAI, Cohere/Jina, TEI routes) [dim]({took:.1f}s)[/]")
        return record

    def _start(self, cmd: list[str], install: TritonInstall) -> Endpoints:
        """Spawn the server, record it, and wait until it is ready (stopped and forgotten again if it never is)."""
        o = self.options
        record = Instance(
            pid=0,
            start_ticks=None,
            repository=str(Path(o.repository).resolve()),
            host=o.host,
            reach_host=process.reach_host(o.host),
            http_port=o.http_port,
            grpc_port=o.grpc_port,
            metrics_port=o.metrics_port,
            command=cmd,
            started_at=0.0,
            env=self._env(install),
            ready_timeout_s=o.timeout_s,
        )
        self._proc, inst = spawn(self.directory, record)
        try:
            self._wait(inst)
        except BaseException:
            self._stop(inst, timeout_s=10.0)
            forget(self.directory)
            raise
        return inst.endpoints

    def _wait(self, inst: Instance) -> None:
        proc = self._proc
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
                self._say(f"  waiting for /v2/health/ready... {elapsed:.0f}s")

        if not (err.is_terminal and not self.quiet):
            self._say(f"{title}...")

        def alive() -> bool:
            if dead_stubs(inst):  # Triton 2.51 never finishes a load whose stub died
                raise TritonizeError("a Python stub died while Triton loaded its models")
            return proc.poll() is None

        try:
            with status:
                wait_ready(inst.endpoints, self.options.timeout_s, alive, on_tick)
        except TritonizeError as exc:
            raise start_failure(self.directory, exc, proc.poll()) from None
        self._say(f"[green]✓[/] {title} [dim]({time.monotonic() - start:.1f}s)[/]")

    def admin_key(self) -> str:
        return admin_key(self.directory)

    def switch(self, model: str | None = None) -> versions.Switch:
        """Serve the version the repository now names for `model` (after `generate --version N`), refusing no
        request."""
        server = self.controlled()
        return versions.switch(server.http_url, server.repository, self.config_name, server.headers, self._say, model)

    def controlled(self) -> rollout.Server:
        """The running server, which must allow model control (loading versions needs it)."""
        found = self._instance()
        if found is None:
            raise TritonizeError(f"no local server on port {self.options.http_port}", hint="start one: deploy.py local up")
        directory, inst = found
        if inst.model_control != "explicit":
            raise TritonizeError(
                f"the server on port {inst.http_port} runs without model control, so it cannot load a version",
                hint="start it with `deploy.py local up --model-control explicit` (the API needs the instance's admin key)",
            )
        return rollout.Server(inst.endpoints.http, Path(inst.repository), self.config_name,
                              {ADMIN_HEADER: admin_key(directory)}, self._say)

    def admin_headers(self, protocol: str = "http") -> dict[str, str]:
        """The header a client sends to use the restricted APIs of this server (gRPC prefixes Triton's name)."""
        return {(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + ADMIN_HEADER: self.admin_key()}

    # the supervisor
    def _start_supervisor(self) -> None:
        (self.directory / SUPERVISOR_STATE_FILE).unlink(missing_ok=True)
        env = {**os.environ, "PYTHONPATH": child_pythonpath()}
        with open(self.directory / SUPERVISOR_LOG_FILE, "ab") as log:
            subprocess.Popen([sys.executable, "-m", SUPERVISOR_MODULE, str(self.directory)],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                             cwd=self.directory, start_new_session=True)
        deadline = time.monotonic() + 10.0
        while read_supervisor(self.directory) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self._say("[green]✓[/] supervisor watching the server (brings it back if a stub dies or it stops answering)")

    def _stop_supervisor(self, directory: Path) -> None:
        """Stop the supervisor before the server, so that it does not restart what is being stopped."""
        state = read_supervisor(directory)
        if state is None or not state.alive():
            return
        self._signal_pid(state.pid, signal.SIGTERM)
        deadline = time.monotonic() + SUPERVISOR_STOP_S
        while state.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if state.alive():
            self._signal_pid(state.pid, signal.SIGKILL)

    @staticmethod
    def _signal_pid(pid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)

    def _last_log_line(self, width: int) -> str:
        """What the server is doing now, from its log, for the progress line."""
        for line in reversed(process.tail_lines(self.log_file, 5).splitlines()):
            text = line.split("] ", 1)[-1].strip().strip('"')
            if text and not any(n in text for n in process.NOISE):
                return escape(text[:width])
        return ""

    def down(self, timeout_s: float | None = None) -> bool:
        found = self._instance()
        directory = found[0] if found else self._supervised()
        if directory is None:
            self._say(f"no local Triton server is running (run dir {self.options.run_dir})")
            self._stop_prometheus(self.directory)
            return False
        self._stop_all(directory, self.stop_timeout_s if timeout_s is None else timeout_s)
        return True

    def _supervised(self) -> Path | None:
        """This instance's directory when only its supervisor runs (between two tries of a restart)."""
        state = read_supervisor(self.directory)
        return self.directory if state and state.alive() else None

    def _stop_all(self, directory: Path, timeout_s: float) -> None:
        """Supervisor first (it would restart what is stopped), then the server it left in the record (drained
        unless a stub is dead), then Prometheus; the record goes last."""
        self._stop_supervisor(directory)
        if stop_api(directory):  # before the server: it would only answer 424 through a stopped server
            self._say("[green]✓[/] API stopped")
        inst = read_instance(directory)  # read after the supervisor: it may have restarted the server meanwhile
        if inst and (inst.alive() or process.group_processes(inst.pid)):  # a crashed server's stubs too
            dead = dead_stubs(inst, read_supervisor(directory))
            if dead:
                self._say(f"[yellow]a Python stub of this server has died ({', '.join(map(str, dead))}): "
                          "nothing can drain through it, so the server stops at once[/]")
            spent = 0.0 if dead or not inst.alive() else drain(inst.endpoints, timeout_s)
            left = max(timeout_s - spent, 1.0)
            watcher = read_supervisor(directory)
            if watcher and watcher.server_pid == inst.pid and watcher.replaced_stubs:
                # The step instances whose stubs died never finish unloading in Triton 2.51, so SIGTERM would
                # wait out the whole exit timeout: once drained, the rest gets a short grace.
                left = min(left, REPLACED_GRACE_S)
            self._stop(inst, 0.0 if dead else left)
        forget(directory)
        self._stop_prometheus(directory)  # after the server: the drain shows in its last scrapes

    def _stop(self, inst: Instance, timeout_s: float) -> None:
        """SIGTERM to the group (Triton drains in-flight requests), SIGKILL after timeout_s (0: at once)."""
        start = time.monotonic()
        proc = self._proc if self._proc and self._proc.pid == inst.pid else None
        stop(inst, timeout_s, proc,
             on_timeout=lambda: self._say(f"[yellow]Triton did not stop within {timeout_s:.0f}s; killing it[/]"))
        self._say(f"[green]✓[/] Triton stopped (pid {inst.pid}) [dim]({time.monotonic() - start:.1f}s)[/]")
        self._proc = None

    def status(self) -> ServerStatus:
        """Ready only when a tiny inference through the ensemble answers: Triton's own ready endpoint
        keeps saying ready after a stub has died."""
        found = self._instance()
        if found is None:
            state = read_supervisor(self.directory)
            if state and state.alive() and state.state != "stopped":
                why = state.last_reason + (f"; last try: {state.last_error}" if state.last_error else "")
                return ServerStatus(True, False, detail=f"{state.state} ({why})", restarts=state.restarts,
                                    reloads=state.reloads)
            return ServerStatus(False, False, detail=f"not running (nothing in {self.options.run_dir})")
        directory, inst = found
        endpoints = inst.endpoints
        code, _ = http_get(f"{endpoints.http}/v2/health/ready")
        health_file = Path(inst.repository) / HEALTH_FILE
        if health_file.is_file():
            probe = probe_file(endpoints.http, str(health_file))
            answered, health = probe.ok, probe.detail
        else:
            answered, health = True, f"unchecked: no {HEALTH_FILE} in the repository (regenerate it to get one)"
        state = read_supervisor(directory)
        watched = state is not None and state.alive()
        prometheus = self.prometheus(directory).running()
        dead = dead_stubs(inst, state)
        detail = (f"{inst.variant} configs, pid {inst.pid}, HTTP {endpoints.http}, gRPC {endpoints.grpc}, "
                  f"log {directory / LOG_FILE}")
        if watched and state.state != "watching":
            detail = f"{state.state} ({state.last_reason}); {detail}"
        return ServerStatus(
            running=True,
            ready=code == 200 and answered and not dead,
            endpoints=endpoints,
            models=repository_models(endpoints, {ADMIN_HEADER: admin_key(directory)}),
            detail=detail,
            health=(f"a Python stub has died (pid {', '.join(map(str, dead))}); " if dead else "") + health,
            restarts=state.restarts if watched else None,
            reloads=state.reloads if watched else None,
            prometheus=prometheus.url if prometheus else None,
            monitoring=self.prometheus(directory).describe(),
            api=self._api_status(directory),
        )

    @staticmethod
    def _api_status(directory: Path) -> str | None:
        """The API's URL and its own /health, in a line; None where none was started."""
        record = read_api(directory)
        if record is None:
            return None
        if not record.alive():
            return f"{record.url}: not running (the supervisor starts it again)"
        code, detail = api_health(record.url)
        restarts = f", {record.restarts} restart(s)" if record.restarts else ""
        return f"{record.url}: " + ("healthy" if code == 200 else f"unhealthy ({code}: {detail})") + restarts

    def logs(self, tail: int | None = None) -> str:
        found = self._instance()
        directory = found[0] if found else self.directory
        path = directory / LOG_FILE
        if not path.exists():
            raise TritonizeError(f"no log at {path}", hint="start a server with `deploy.py local up`")
        return process.tail_lines(path, tail)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tritonserver",
        type=Path,
        default=None,
        help="tritonserver binary to run (default: the one in the nvidia-pytriton wheel)",
    )
    parser.add_argument(
        "--variant",
        choices=tuple(VARIANT_CONFIGS),
        default=DEFAULT_VARIANT,
        help="`up`: production serves each step's config.pbtxt as NVIDIA's container does (the model step on "
             "Triton's native onnxruntime backend: `make backend` builds it); fused serves configs/fused.pbtxt, "
             "the tokenizer and the graph in one Python step (default: %(default)s)",
    )
    parser.add_argument(
        "--onnxruntime-backend",
        type=Path,
        default=None,
        help=f"`up --variant production`: a built backend folder (default: ${native_backend.ENV}, else the one "
             "`make backend` built)",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=DEFAULT_STOP_TIMEOUT_S,
        help="`down`: seconds to let in-flight requests drain before SIGKILL (default: %(default)s)",
    )
    parser.add_argument(
        "--no-supervise",
        action="store_true",
        help="`up`: start no supervisor (by default one reloads a step whose stub died, or restarts the server)",
    )
    a = parser.add_argument_group("the HTTP API (OpenAI, Cohere/Jina and text-embeddings-inference routes)")
    a.add_argument("--no-api", action="store_true", help="`up`: start no API beside the server")
    a.add_argument("--api-port", type=int, default=DEFAULT_API_PORT, help="`up`: the API's port, on --host "
                   "(default: %(default)s)")
    a.add_argument("--api-key-file", type=Path, default=None,
                   help="`up`: require `Authorization: Bearer <key>` on every API route but /health (the file's key)")
    g = parser.add_argument_group("monitoring")
    g.add_argument(
        "--monitoring",
        action="store_true",
        help=f"`up`: also start a Prometheus that scrapes the metrics port (needs the binary: {INSTALL_HINT})",
    )
    g.add_argument("--prometheus-port", type=int, default=DEFAULT_PROMETHEUS_PORT,
                   help="`up --monitoring`: Prometheus's port, on --host (default: %(default)s)")
    g.add_argument("--scrape-interval", type=float, default=DEFAULT_SCRAPE_INTERVAL_S,
                   help="`up --monitoring`: seconds between scrapes (default: %(default)s)")


def from_args(options: ServerOptions, args: argparse.Namespace) -> Runtime:
    return LocalRuntime(
        options,
        tritonserver=getattr(args, "tritonserver", None),
        variant=getattr(args, "variant", DEFAULT_VARIANT),
        onnxruntime_backend=getattr(args, "onnxruntime_backend", None),
        stop_timeout_s=getattr(args, "stop_timeout", DEFAULT_STOP_TIMEOUT_S),
        supervise=not getattr(args, "no_supervise", False),
        monitoring=MonitoringOptions(
            port=getattr(args, "prometheus_port", DEFAULT_PROMETHEUS_PORT),
            scrape_interval_s=getattr(args, "scrape_interval", DEFAULT_SCRAPE_INTERVAL_S),
        ) if getattr(args, "monitoring", False) else None,
        api=None if getattr(args, "no_api", True) else ApiOptions(
            port=getattr(args, "api_port", DEFAULT_API_PORT), key_file=getattr(args, "api_key_file", None)),
    )
