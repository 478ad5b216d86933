"""Prometheus beside the local server: `deploy.py local up --monitoring`.

Grafana is not packaged for Debian, so the local stack is Prometheus alone:
Debian's `prometheus` package (or any `prometheus` binary on PATH), run as
its own process with its own configuration, storage and log under the
server's instance directory (`<run_dir>/local-<http_port>/prometheus/`),
listening where the server listens (loopback by default) and scraping its
metrics port. Neither the lifecycle API nor the admin API is turned on.
The compose profile `monitoring` adds Grafana and the dashboards
(`monitoring/`); its Prometheus configuration and rules are rendered from the
same templates as the local ones.
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
from ..serving import statistics
from . import machine
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
RULES_TEMPLATE = TEMPLATES_DIR / "monitoring" / "rules.yml.j2"
RULES_FILE = "rules.yml"  # beside the configuration, which names it relative to itself
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
COMPOSE_DIR = Path("monitoring") / "prometheus"  # mounted whole, so the configuration finds its rules
COMPOSE_CONFIG = COMPOSE_DIR / CONFIG_FILE
COMPOSE_RULES = COMPOSE_DIR / RULES_FILE
COMPOSE_WRITTEN_BY = "Rendered from templates/monitoring/: python -m tritonize.runtime.monitoring"
# What `up` prints to try: requests per second per model, from Triton's own counter.
EXAMPLE_QUERY = "sum by (model) (rate(nv_inference_request_success[1m]))"


@dataclass(frozen=True)
class MonitoringOptions:
    """The local Prometheus: its port, how often it scrapes, which binary."""

    port: int = DEFAULT_PORT
    scrape_interval_s: float = DEFAULT_SCRAPE_INTERVAL_S
    binary: str = BINARY
    retention: str = RETENTION


@dataclass(frozen=True)
class Drift:
    """When a window's answers count as drifted from the baseline (docs/operate.md says why these numbers).

    The binned KS distance is at most the two-sample KS statistic, whose critical value at alpha = 0.001 is
    1.95 * sqrt(1/n + 1/m): with n >= min_rows = 200 rows in the window it stays under max_ks = 0.2 for any
    baseline of m >= 181 rows, so a distance above 0.2 is both significant and a fifth of the rows moved."""

    window: str = "30m"
    min_rows: int = 200
    max_ks: float = 0.2
    for_: str = "15m"  # overlapping windows: a drift that holds this long is no chance excursion

    @property
    def record(self) -> str:
        """The recorded series, by Prometheus's `level:metric:operations`, one per statistic (label)."""
        return f"model_version:tritonize_output_drift:ks{self.window}"


@dataclass(frozen=True)
class Alert:
    """One alerting rule of rules.yml; summary and description are Prometheus templates ($labels, $value)."""

    name: str
    expr: str
    for_: str
    summary: str
    description: str
    severity: str = "warning"


DRIFT = Drift()
ALERT_WINDOW = "10m"  # the shares below are over this window ...
ALERT_MIN_REQUESTS = 20  # ... and only where it holds this many requests (or texts): 1 of 2 is no rate
MAX_TRUNCATED_SHARE = 0.1  # texts served as their first max-length tokens: the model saw part of them
MAX_REFUSED_PER_TEXT = 0.05  # requests refused (INVALID_ARG) per text accepted: a client sends what cannot be served
MAX_ERROR_SHARE = 0.01  # requests failed by the server


def _share(part: str, whole: str, bound: float, minimum: str) -> str:
    """`part / whole > bound` per model, where the window holds ALERT_MIN_REQUESTS of `minimum` or more."""
    return f"{part}\n  /\n{whole}\n  > {bound:g}\nand\n{minimum} >= {ALERT_MIN_REQUESTS}"


def _rate(selector: str) -> str:
    return f"sum by (model) (rate({selector}[{ALERT_WINDOW}]))"


def _count(selector: str) -> str:
    return f"sum by (model) (increase({selector}[{ALERT_WINDOW}]))"


TEXTS, TRUNCATED = "tritonize_texts_total", "tritonize_texts_truncated_total"
REFUSED = "tritonize_inputs_rejected_total"
API_REQUESTS, API_ERRORS = "tritonize_api_requests_total", 'tritonize_api_requests_total{status=~"5.."}'
TRITON_ANSWERED = "nv_inference_request_success"
# Triton's failures that a backend or a full queue caused. A refused input is an error answer of a Python step,
# which Triton 2.51 counts as that step's success and twice as a failure of the ensemble, with reason OTHER.
TRITON_FAILED = 'nv_inference_request_failure{reason=~"BACKEND|REJECTED"}'
ALERTS = (
    Alert("TritonizeOutputDrift", f"{DRIFT.record} > {DRIFT.max_ks:g}", DRIFT.for_,
          "{{ $labels.model }} version {{ $labels.version }}: {{ $labels.statistic }} drifted from its baseline",
          f"Over the last {DRIFT.window} the distribution of {{{{ $labels.statistic }}}} is "
          f"{{{{ $value | printf \"%.2f\" }}}} (Kolmogorov-Smirnov) from the baseline's, above {DRIFT.max_ks:g}: "
          "the inputs or the model changed."),
    Alert("TritonizeTextsTruncated",
          _share(_rate(TRUNCATED), _rate(TEXTS), MAX_TRUNCATED_SHARE, _count(TEXTS)), "15m",
          "{{ $labels.model }}: many texts truncated",
          f"{{{{ $value | humanizePercentage }}}} of the texts were longer than the max length (the bound is "
          f"{MAX_TRUNCATED_SHARE:.0%}): the model saw only their first tokens."),
    Alert("TritonizeInputsRefused",
          _share(_rate(REFUSED), _rate(TEXTS), MAX_REFUSED_PER_TEXT, f"({_count(REFUSED)} + {_count(TEXTS)})"),
          "10m", "{{ $labels.model }}: many requests refused",
          f"{{{{ $value | printf \"%.2f\" }}}} requests refused (INVALID_ARG) per text accepted (the bound is "
          f"{MAX_REFUSED_PER_TEXT:g}): a client sends what cannot be served; {REFUSED} says why."),
    Alert("TritonizeTritonFailures",
          _share(_rate(TRITON_FAILED), f"({_rate(TRITON_ANSWERED)} + {_rate(TRITON_FAILED)})", MAX_ERROR_SHARE,
                 _count(TRITON_ANSWERED)), "5m",
          "{{ $labels.model }}: requests failing in Triton",
          f"{{{{ $value | humanizePercentage }}}} of the requests failed in a backend or at a full queue (the "
          f"bound is {MAX_ERROR_SHARE:.0%})."),
    Alert("TritonizeApiErrors",
          _share(_rate(API_ERRORS), _rate(API_REQUESTS), MAX_ERROR_SHARE, _count(API_REQUESTS)), "5m",
          "{{ $labels.model }}: the HTTP API answers 5xx",
          f"{{{{ $value | humanizePercentage }}}} of the API's requests were answered 5xx (the bound is "
          f"{MAX_ERROR_SHARE:.0%})."),
)


def le_normalized(selector: str) -> str:
    """`le` without a trailing `.0`: Prometheus 3 rewrites a histogram's `le="1"` as `le="1.0"` at scrape but
    leaves a gauge's label as written, so the buckets and their baseline meet on the same bound either way."""
    return f'label_replace({selector}, "le", "$1", "le", "(.+)\\\\.0")'


def histograms() -> list[str]:
    """Every histogram the registered tasks count, by name (tasks.statistics())."""
    from .. import tasks

    return [name for name, s in tasks.statistics().items() if s.histogram]


def render_rules(written_by: str) -> str:
    """rules.yml, from templates/monitoring/rules.yml.j2: a drift record per histogram the registered tasks count
    (`histograms()`), and ALERTS."""
    return _render(RULES_TEMPLATE, written_by=written_by, histograms=histograms(), drift=DRIFT,
                   baseline_suffix=statistics.BASELINE_SUFFIX, alerts=ALERTS, le_normalized=le_normalized)


def drift_expressions(drift: Drift = DRIFT) -> dict[str, str]:
    """statistic -> the PromQL of its drift record under `drift` (another window or minimum: what a test can
    wait for), as rules.yml renders it."""
    import yaml

    rendered = _render(RULES_TEMPLATE, written_by="", histograms=histograms(), drift=drift,
                       baseline_suffix=statistics.BASELINE_SUFFIX, alerts=(), le_normalized=le_normalized)
    return {r["labels"]["statistic"]: r["expr"] for g in yaml.safe_load(rendered)["groups"] for r in g["rules"] or ()
            if "record" in r}


def _render(template: Path, **values) -> str:
    import jinja2

    if not template.is_file():
        raise TritonizeError(f"missing template {template}", hint="reinstall tritonize")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(template.read_text()).render(**values)


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
    /metrics where one runs beside it; the rules in RULES_FILE beside it."""
    return _render(
        TEMPLATE,
        written_by=written_by,
        scrape_interval=duration(scrape_interval_s),
        scrape_timeout=duration(min(scrape_interval_s, MAX_SCRAPE_TIMEOUT_S)),
        rule_files=[RULES_FILE],
        jobs={JOB: list(targets), **({API_JOB: list(api_targets)} if api_targets else {})},
    )


def compose_config() -> str:
    """monitoring/prometheus/prometheus.yml, the compose profile's configuration."""
    return render_config([COMPOSE_TARGET], DEFAULT_SCRAPE_INTERVAL_S, written_by=COMPOSE_WRITTEN_BY,
                         api_targets=[COMPOSE_API_TARGET])


def compose_rules() -> str:
    """monitoring/prometheus/rules.yml, the compose profile's rules (the local Prometheus writes the same)."""
    return render_rules(COMPOSE_WRITTEN_BY)


def write_configuration(directory: Path, targets: Sequence[str], scrape_interval_s: float, written_by: str,
                        api_targets: Sequence[str] = ()) -> Path:
    """prometheus.yml and the rules it names, into `directory`; the configuration's path."""
    (directory / RULES_FILE).write_text(render_rules(written_by))
    config = directory / CONFIG_FILE
    config.write_text(render_config(targets, scrape_interval_s, written_by, api_targets))
    return config


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
        machine.reap(self.pid)
        ticks = machine.start_ticks(self.pid)
        return ticks is not None and ticks == self.start_ticks and not machine.is_zombie(self.pid)


class LocalPrometheus:
    """One server's Prometheus: config, storage, log and state in `<instance_dir>/prometheus/`."""

    def __init__(self, instance_dir: Path, options: MonitoringOptions | None = None, host: str = "127.0.0.1"):
        self.directory = Path(instance_dir) / DIRECTORY
        self.options = options or MonitoringOptions()
        self.host = host

    @property
    def url(self) -> str:
        return f"http://{machine.url_host(machine.reach_host(self.host))}:{self.options.port}"

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
        if machine.port_in_use(self.host, port):
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
            f"--web.listen-address={machine.url_host(self.host)}:{self.options.port}",
        ]

    def start(self, target: str, binary: Path | None = None, api_target: str | None = None) -> str:
        """Write the configuration, start Prometheus scraping `target` (host:port) and the API's /metrics
        (`api_target`, where one runs), wait until it is ready; its URL."""
        binary = binary or find_binary(self.options.binary)
        self.directory.mkdir(parents=True, exist_ok=True)
        write_configuration(self.directory, [target], self.options.scrape_interval_s,
                            written_by=f"Written by `deploy.py local up --monitoring` for the server at {target}.",
                            api_targets=[api_target] if api_target else ())
        if self.log_file.exists():
            self.log_file.replace(self.log_file.with_suffix(".log.1"))
        cmd = self.command(binary)
        with open(self.log_file, "wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    cwd=self.directory, start_new_session=True)
        state = PrometheusState(
            pid=proc.pid,
            start_ticks=machine.start_ticks(proc.pid),
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
                lines = machine.relevant_log_lines(machine.tail_lines(self.log_file, None), limit=10)
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


if __name__ == "__main__":  # `python -m tritonize.runtime.monitoring`: rewrites the compose profile's two files
    COMPOSE_CONFIG.write_text(compose_config())
    COMPOSE_RULES.write_text(compose_rules())
