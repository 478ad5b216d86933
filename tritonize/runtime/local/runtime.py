"""`LocalRuntime`: the stack `deploy.py local` serves, as one `Runtime`: the server process (server.py), then what
runs beside it (companions.py: the API, the supervisor, Prometheus), each found again by its instance directory.
`up` starts them in that order and undoes a half-started stack; `down` stops the supervisor first (it would restart
what is stopped), then the API, the server (drained) and Prometheus."""

from __future__ import annotations

from pathlib import Path

from ...api.child import ApiOptions
from ...console import err
from ...errors import TritonizeError
from ...repository import variant_config
from ...spec import DEFAULT_VARIANT
from .. import candidate, machine, versions
from ..base import Endpoints, Runtime, ServerOptions, ServerStatus, drain, require_repository
from ..instance import ADMIN_HEADER, LOG_FILE, Instance, admin_key, check_ports, dead_stubs, forget, instance_dir
from ..instance import read_instance, read_supervisor, stop_api
from ..monitoring import LocalPrometheus, MonitoringOptions
from . import companions, status
from .server import TritonProcess
from .wheel import TritonInstall, check_install, find_install

DEFAULT_HTTP_PORT = ServerOptions().http_port
GRPC_HEADER_PREFIX = "triton-grpc-protocol-"  # what Triton expects before a restricted gRPC protocol's header
DEFAULT_STOP_TIMEOUT_S = 30.0  # Triton's own --exit-timeout-secs default
REPLACED_GRACE_S = 3.0  # SIGTERM to SIGKILL for a drained server that has steps reloaded after a stub died


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
        self.server = TritonProcess(options, self.directory, self.config_name, onnxruntime_backend, self._say, quiet)

    @property
    def server_pid(self) -> int | None:
        """The running server's PID (it leads its own process group, stubs included)."""
        return self.server.proc.pid if self.server.proc else None

    @property
    def log_file(self) -> Path:
        return self.directory / LOG_FILE

    def __enter__(self) -> Endpoints:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        # Only the server this object started (or its supervisor restarted): never another one found in run_dir.
        self._stop_all(self.directory, self.stop_timeout_s)

    def prometheus(self, directory: Path | None = None) -> LocalPrometheus:
        """The Prometheus beside the server (running or not)."""
        return LocalPrometheus(directory or self.directory, self.monitoring, self.options.host)

    def _say(self, message: str) -> None:
        if not self.quiet:
            err.print(message)

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
        """The server's command line (server.py)."""
        return self.server.command(install, backend_dir)

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
        companions.stop_prometheus(self.prometheus(), self.directory, self._say)  # one left by a server that died
        check_ports(o.host, o.http_port, o.grpc_port, o.metrics_port)
        prometheus = self.prometheus() if self.monitoring else None
        binary = prometheus.check(taken=(o.http_port, o.grpc_port, o.metrics_port)) if prometheus else None
        install = find_install(self.tritonserver)
        check_install(install)

        self.directory.mkdir(parents=True, exist_ok=True)
        endpoints = self.server.start(install)
        try:
            api = companions.start_api(self.directory, o, self.api, endpoints, self._say) if self.api else None
        except BaseException:
            self.__exit__()  # no half stack: the server goes too
            raise
        if self.supervise:
            companions.start_supervisor(self.directory, self._say)
        if prometheus:
            try:
                api_target = api.url.split("//", 1)[1] if api else None
                prometheus.start(f"{machine.url_host(endpoints.host)}:{endpoints.metrics_port}", binary, api_target)
            except BaseException:
                self.__exit__()  # no half stack: the server goes too
                raise
            companions.report_first_scrape(prometheus, self._say)
        return endpoints

    def admin_key(self) -> str:
        return admin_key(self.directory)

    def switch(self, model: str | None = None) -> versions.Switch:
        """Serve the version the repository now names for `model` (after `generate --version N`), refusing no
        request."""
        server = self.controlled()
        return versions.switch(server.http_url, server.repository, self.config_name, server.headers, self._say, model)

    def controlled(self) -> candidate.Server:
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
        return candidate.Server(inst.endpoints.http, Path(inst.repository), self.config_name,
                              {ADMIN_HEADER: admin_key(directory)}, self._say)

    def admin_headers(self, protocol: str = "http") -> dict[str, str]:
        """The header a client sends to use the restricted APIs of this server (gRPC prefixes Triton's name)."""
        return {(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + ADMIN_HEADER: self.admin_key()}

    def down(self, timeout_s: float | None = None) -> bool:
        found = self._instance()
        directory = found[0] if found else self._supervised()
        if directory is None:
            self._say(f"no local Triton server is running (run dir {self.options.run_dir})")
            companions.stop_prometheus(self.prometheus(), self.directory, self._say)
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
        companions.stop_supervisor(directory)
        if stop_api(directory):  # before the server: it would only answer 424 through a stopped server
            self._say("[green]✓[/] API stopped")
        inst = read_instance(directory)  # read after the supervisor: it may have restarted the server meanwhile
        if inst and (inst.alive() or machine.group_processes(inst.pid)):  # a crashed server's stubs too
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
            self.server.stop(inst, 0.0 if dead else left)
        forget(directory)
        # after the server: the drain shows in its last scrapes
        companions.stop_prometheus(self.prometheus(directory), directory, self._say)

    def status(self) -> ServerStatus:
        """Ready only when a tiny inference through the ensemble answers (status.py)."""
        found = self._instance()
        if found is None:
            return status.without_server(self.directory, self.options.run_dir)
        directory, inst = found
        return status.of_server(directory, inst, self.prometheus(directory))

    def logs(self, tail: int | None = None) -> str:
        found = self._instance()
        directory = found[0] if found else self.directory
        path = directory / LOG_FILE
        if not path.exists():
            raise TritonizeError(f"no log at {path}", hint="start a server with `deploy.py local up`")
        return machine.tail_lines(path, tail)
