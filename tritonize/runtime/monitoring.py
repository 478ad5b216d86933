"""Prometheus beside the local server: `deploy.py local up --monitoring`.

Grafana is not packaged for Debian, so the local stack is Prometheus alone:
Debian's `prometheus` package (or any `prometheus` binary on PATH), run as
its own process with its own configuration, storage and log under the
server's instance directory (`<run_dir>/local-<http_port>/prometheus/`),
listening where the server listens (loopback by default) and scraping its
metrics port. Neither the lifecycle API nor the admin API is turned on.
The compose profile `monitoring` adds Grafana and the dashboard
(`monitoring/`); its Prometheus configuration is rendered from the same
template as the local one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import TritonizeError
from ..paths import TEMPLATES_DIR
from . import process
from .base import http_get

BINARY = "prometheus"
INSTALL_HINT = "apt-get install prometheus"
DEFAULT_PORT = 9090
DEFAULT_SCRAPE_INTERVAL_S = 5.0
MAX_SCRAPE_TIMEOUT_S = 10.0  # Prometheus's own default; never longer than the interval
RETENTION = "7d"
JOB = "triton"
API_JOB = "tritonize-api"  # the API's request counts and latencies (tritonize_api_*)
TEMPLATE = TEMPLATES_DIR / "monitoring" / "prometheus.yml.j2"
DIRECTORY = "prometheus"  # under the server's instance directory
CONFIG_FILE = "prometheus.yml"
STATE_FILE = "prometheus.json"
LOG_FILE = "prometheus.log"
DATA_DIR = "data"
READY_TIMEOUT_S = 30.0
FIRST_SCRAPE_S = 10.0  # Prometheus applies a new target within 5 s, then scrapes it within an interval
STOP_TIMEOUT_S = 10.0
# docker-compose.yml: the network alias both Triton services (triton, triton-cpu) answer to, and the
# committed configuration its Prometheus service mounts.
COMPOSE_TARGET = "tritonserver:8002"
COMPOSE_API_TARGET = "api:8080"  # the compose file's api service (docker/api.Dockerfile's port)
COMPOSE_CONFIG = Path("monitoring") / "prometheus" / "prometheus.yml"
# What `up` prints to try: requests per second per model, from Triton's own counter.
EXAMPLE_QUERY = "sum by (model) (rate(nv_inference_request_success[1m]))"


@dataclass(frozen=True)
class MonitoringOptions:
    """The local Prometheus: its port, how often it scrapes, which binary."""

    port: int = DEFAULT_PORT
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    binary: str = BINARY
    retention: str = RETENTION


def duration(seconds: float) -> str:
    """Seconds as a Prometheus duration: whole seconds as `5s`, fractions in milliseconds (`500ms`)."""
    if seconds <= 0:
        raise TritonizeError(f"a scrape interval must be positive, not {seconds}")
    if float(seconds).is_integer():
        return f"{int(seconds)}s"
    return f"{max(1, round(seconds * 1000))}ms"


def render_config(targets: Sequence[str], scrape_interval_s: float, written_by: str,
                  api_targets: Sequence[str] = ()) -> str:
    """prometheus.yml, from templates/monitoring/prometheus.yml.j2: Triton's metrics port, and the API's
    /metrics where one runs beside it."""
    import jinja2

    if not TEMPLATE.is_file():
        raise TritonizeError(f"missing template {TEMPLATE}", hint="reinstall tritonize")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(TEMPLATE.read_text()).render(
        written_by=written_by,
        scrape_interval=duration(scrape_interval_s),
        scrape_timeout=duration(min(scrape_interval_s, MAX_SCRAPE_TIMEOUT_S)),
        jobs={JOB: list(targets), **({API_JOB: list(api_targets)} if api_targets else {})},
    )


def compose_config() -> str:
    """monitoring/prometheus/prometheus.yml, the compose profile's configuration."""
    return render_config(
        [COMPOSE_TARGET],
        DEFAULT_SCRAPE_INTERVAL_S,
        written_by=f"Rendered from templates/monitoring/prometheus.yml.j2: "
        f"python -m tritonize.runtime.monitoring > {COMPOSE_CONFIG}",
        api_targets=[COMPOSE_API_TARGET],
    )


def find_binary(name: str = BINARY) -> Path:
    """The prometheus binary, or one clear error that says how to install it."""
    found = shutil.which(name)
    if found is None:
        raise TritonizeError(
            f"--monitoring runs a local Prometheus, but there is no `{name}` on PATH",
            hint=INSTALL_HINT + "  (as root; or: make system-deps)",
        )
    return Path(found)


@dataclass
class PrometheusState:
    """What `up` leaves for `down` and `status`: who the process is and what it scrapes."""

    pid: int
    start_ticks: int | None
    url: str
    target: str
    scrape_interval: str
    command: list[str]
    started_at: float

    def alive(self) -> bool:
        process.reap(self.pid)
        ticks = process.start_ticks(self.pid)
        return ticks is not None and ticks == self.start_ticks and not process.is_zombie(self.pid)


class LocalPrometheus:
    """One server's Prometheus: config, storage, log and state in `<instance_dir>/prometheus/`."""

    def __init__(self, instance_dir: Path, options: MonitoringOptions | None = None, host: str = "127.0.0.1"):
        self.directory = Path(instance_dir) / DIRECTORY
        self.options = options or MonitoringOptions()
        self.host = host

    @property
    def url(self) -> str:
        return f"http://{process.url_host(process.reach_host(self.host))}:{self.options.port}"

    @property
    def log_file(self) -> Path:
        return self.directory / LOG_FILE

    def state(self) -> PrometheusState | None:
        try:
            return PrometheusState(**json.loads((self.directory / STATE_FILE).read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def running(self) -> PrometheusState | None:
        state = self.state()
        return state if state and state.alive() else None

    def check(self, taken: Sequence[int] = ()) -> Path:
        """Before the server starts: the binary exists, the interval is one, the port is free; the binary's path."""
        binary = find_binary(self.options.binary)
        duration(self.options.scrape_interval_s)
        port = self.options.port
        if port in taken:
            raise TritonizeError(f"the Prometheus port {port} is one of the server's ports",
                                 hint="choose another with --prometheus-port")
        if process.port_in_use(self.host, port):
            raise TritonizeError(
                f"Prometheus port {port} on {self.host} already in use",
                hint="choose a free one with --prometheus-port (Debian's prometheus.service listens on 9090; "
                "stop it with `systemctl disable --now prometheus`)",
            )
        return binary

    def command(self, binary: Path) -> list[str]:
        return [
            str(binary),
            f"--config.file={self.directory / CONFIG_FILE}",
            f"--storage.tsdb.path={self.directory / DATA_DIR}",
            f"--storage.tsdb.retention.time={self.options.retention}",
            f"--web.listen-address={process.url_host(self.host)}:{self.options.port}",
        ]

    def start(self, target: str, binary: Path | None = None, api_target: str | None = None) -> str:
        """Write the configuration, start Prometheus scraping `target` (host:port) and the API's /metrics
        (`api_target`, where one runs), wait until it is ready; its URL."""
        binary = binary or find_binary(self.options.binary)
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / CONFIG_FILE).write_text(
            render_config([target], self.options.scrape_interval_s,
                          written_by=f"Written by `deploy.py local up --monitoring` for the server at {target}.",
                          api_targets=[api_target] if api_target else ())
        )
        if self.log_file.exists():
            self.log_file.replace(self.log_file.with_suffix(".log.1"))
        cmd = self.command(binary)
        with open(self.log_file, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=self.directory, start_new_session=True)
        state = PrometheusState(
            pid=proc.pid,
            start_ticks=process.start_ticks(proc.pid),
            url=self.url,
            target=target,
            scrape_interval=duration(self.options.scrape_interval_s),
            command=cmd,
            started_at=time.time(),
        )
        (self.directory / STATE_FILE).write_text(json.dumps(asdict(state), indent=2))
        deadline = time.monotonic() + READY_TIMEOUT_S
        while http_get(f"{self.url}/-/ready", timeout=1.0)[0] != 200:
            if proc.poll() is not None or time.monotonic() > deadline:
                code = proc.poll()
                self.stop()
                lines = process.relevant_log_lines(process.tail_lines(self.log_file, None), limit=10)
                detail = "\n".join(f"  | {line}" for line in lines) or "  (no error lines in the log)"
                what = f"exited with code {code}" if code is not None else f"was not ready after {READY_TIMEOUT_S:.0f}s"
                raise TritonizeError(f"Prometheus {what}; from {self.log_file}:\n{detail}",
                                     hint=f"the whole log: {self.log_file}")
            time.sleep(0.1)
        return self.url

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM (Prometheus flushes its head block), SIGKILL after timeout_s; False when none was running."""
        state = self.state()
        (self.directory / STATE_FILE).unlink(missing_ok=True)
        if state is None or not state.alive():
            return False
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(state.pid, sig)  # it leads its own process group
            deadline = time.monotonic() + wait_s
            while state.alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if not state.alive():
                return True
        return not state.alive()

    def target(self, url: str | None = None) -> dict | None:
        """The scrape target as Prometheus reports it (health, lastError, lastScrape); None before discovery."""
        code, body = http_get(f"{url or self.url}/api/v1/targets?state=active", timeout=2.0)
        try:
            targets = json.loads(body)["data"]["activeTargets"] if code == 200 else []
        except (ValueError, KeyError, TypeError):
            targets = []
        return targets[0] if targets else None

    def wait_scraped(self, timeout_s: float) -> dict | None:
        """Wait for the first scrape (Prometheus applies new targets on a 5 s tick); the target, or None."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            target = self.target()
            if target and target.get("health") in ("up", "down"):
                return target
            time.sleep(0.2)
        return None

    def describe(self) -> str:
        """One line for `status`: where it runs and whether its last scrape of the server worked."""
        state = self.running()
        if state is None:
            return ""
        line = f"Prometheus {state.url} (pid {state.pid}), scraping {state.target} every {state.scrape_interval}"
        target = self.target(state.url)
        if target is None:
            return f"{line}: no scrape yet"
        error = target.get("lastError") or ""
        return f"{line}: target {target.get('health', 'unknown')}" + (f" ({error})" if error else "")


def sample_query(prometheus_url: str, query: str = EXAMPLE_QUERY) -> str:
    """A curl for an instant query through Prometheus's HTTP API (what `up` prints to try)."""
    return f"curl -sG {prometheus_url}/api/v1/query --data-urlencode 'query={query}'"


if __name__ == "__main__":  # `python -m tritonize.runtime.monitoring > monitoring/prometheus/prometheus.yml`
    import sys

    sys.stdout.write(compose_config())
