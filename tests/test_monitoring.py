"""The monitoring stack: a real Prometheus scraping a real local Triton, and the dashboard's queries through it.

Offline: the dashboard shows what operators need (queue against compute time
per step, batch size, request rate and errors, latency, the served steps'
counters); the compose profile's Prometheus configuration is the template's
rendering; promtool accepts it; a missing `prometheus` is one clear line.
Live, with one server and one Prometheus for the module, started the way
`deploy.py local up --monitoring` starts them: Prometheus's HTTP API shows
the traffic sent, value for value; every dashboard query answers through it;
`down` stops both.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tritonize import chain
from tritonize.bench.stats import settled
from tritonize.errors import TritonizeError
from tritonize.runtime import monitoring as mon
from tritonize.runtime import process
from tritonize.serving.metrics import COUNTED, COUNTERS

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "monitoring" / "grafana" / "dashboards" / "tritonize.json"
PROVISIONING = ROOT / "monitoring" / "grafana" / "provisioning"
COMPOSE = ROOT / "docker-compose.yml"
RATE_INTERVAL = "1m"  # what Grafana's $__rate_interval becomes in these checks

# PromQL words that look like names but are not metrics.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


# --------------------------------------------------------------------------- helpers


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dash: dict) -> list[dict]:
    return [p for p in dash["panels"] if p["type"] != "row"]


def exprs(dash: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [(p["title"], t["expr"]) for p in panels(dash) for t in p["targets"]]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: not functions, label names, keywords or durations."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals (label values)
    e = re.sub(r"\{[^}]*\}", "", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", "", e)  # range durations
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", e)  # label lists
    names = set()
    for m in re.finditer(r"(?<![\w.])[A-Za-z_:][A-Za-z0-9_:]*", e):
        if m.group().lower() in KEYWORDS or re.match(r"\s*\(", e[m.end():]):  # a function or an aggregation
            continue
        names.add(m.group())
    return names


def as_grafana_sends(expr: str) -> str:
    """The query Grafana sends with every model chosen (the variable's allValue) and the rate interval."""
    model = next(v for v in dashboard()["templating"]["list"] if v["name"] == "model")
    sent = expr.replace("$__rate_interval", RATE_INTERVAL).replace("$model", model["allValue"])
    assert "$" not in sent, f"a dashboard variable these checks do not know: {expr}"
    return sent


def need(tool: str) -> str:
    """A binary of Debian's prometheus package; in CI (where `make system-deps` installs it) a failure."""
    found = shutil.which(tool)
    if found is None:
        message = f"no `{tool}` on PATH ({mon.INSTALL_HINT})"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the monitoring tests: {message}")
        pytest.skip(message)
    return found


def query(prometheus: str, promql: str) -> list[dict]:
    """An instant query through Prometheus's HTTP API: the result vector."""
    url = f"{prometheus}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        body = json.loads(resp.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def series(prometheus: str, promql: str) -> dict[tuple[str, tuple], float]:
    """(metric name, the other labels but job and instance) -> value."""
    found = {}
    for row in query(prometheus, promql):
        labels = {k: v for k, v in row["metric"].items() if k not in ("__name__", "job", "instance")}
        found[(row["metric"].get("__name__", ""), tuple(sorted(labels.items())))] = float(row["value"][1])
    return found


def triton_page(metrics_url: str) -> dict[tuple[str, tuple], float]:
    """The same keys, read from Triton's own metrics page."""
    with urllib.request.urlopen(metrics_url, timeout=5) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            head, value = line.rsplit(" ", 1)
            name, _, labels = head.partition("{")
            pairs = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels)))
            found[(name, pairs)] = float(value)
    return found


def deploy(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "deploy.py"), "local", *args], capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)


# --------------------------------------------------------------------------- offline


def test_metric_names_are_read_from_promql() -> None:
    expr = ('sum by (model, reason) (rate(a_total{model=~"$m", reason="x y"}[1m])) / on(model) '
            'max without (quantile) (b_us{quantile="0.99"} offset 5m) + bool c - 1e3')
    assert metric_names(expr) == {"a_total", "b_us", "c"}


def test_the_dashboard_shows_what_operators_need() -> None:
    dash = dashboard()
    by_panel: dict[str, set[str]] = {}
    for title, expr in exprs(dash):
        by_panel.setdefault(title, set()).update(metric_names(expr))

    def panel_with(*names: str) -> str:
        found = [title for title, used in by_panel.items() if set(names) <= used]
        assert found, f"no panel reads all of {names}"
        return found[0]

    queue_vs_compute = panel_with("nv_inference_queue_duration_us", "nv_inference_compute_input_duration_us",
                                  "nv_inference_compute_infer_duration_us", "nv_inference_compute_output_duration_us")
    batch = panel_with("nv_inference_count", "nv_inference_exec_count")
    panel_with("nv_inference_request_success")  # request rate
    panel_with("nv_inference_request_failure")  # errors
    panel_with("tritonize_inputs_rejected_total")  # refused inputs, by reason
    panel_with("nv_inference_request_duration_us")  # average latency
    panel_with("nv_inference_request_summary_us")  # percentiles
    every_name = set().union(*by_panel.values())
    assert set(COUNTERS) <= every_name, f"custom metrics missing: {set(COUNTERS) - every_name}"
    # Per step, and the shapes the titles promise.
    rows = {title: [e for t, e in exprs(dash) if t == title] for title in (queue_vs_compute, batch)}
    assert all("by (model)" in e for e in rows[queue_vs_compute]) and len(rows[queue_vs_compute]) == 2
    assert any(re.search(r"nv_inference_count.*\) / sum by \(model\) \(rate\(nv_inference_exec_count", e)
               for e in rows[batch])
    assert {p["title"] for p in dash["panels"] if p["type"] == "row"} >= {"Latency, from Triton's metrics", "Batching"}


def test_every_query_follows_the_data_source_and_model_variables() -> None:
    dash = dashboard()
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    model = variables["model"]
    assert model["includeAll"] and model["multi"] and model["allValue"] == ".+"
    assert model["query"]["query"] == "label_values(nv_inference_request_success, model)"
    for p in panels(dash):
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["description"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]
            selectors = re.findall(r"\b(?:nv|tritonize)_\w+(\{[^}]*\})?", t["expr"])
            assert selectors and all('model=~"$model"' in s for s in selectors), t["expr"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["uid"] == "tritonize" and dash["editable"] is False


def test_grafana_provisioning_reads_the_compose_services() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())["services"]
    (source,) = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["isDefault"] and source["access"] == "proxy"
    listen = next(a for a in compose["prometheus"]["command"] if a.startswith("--web.listen-address="))
    assert source["url"] == f"http://prometheus:{listen.rsplit(':', 1)[1]}"
    config = yaml.safe_load((ROOT / mon.COMPOSE_CONFIG).read_text())
    assert source["jsonData"]["timeInterval"] == config["global"]["scrape_interval"]
    (provider,) = yaml.safe_load((PROVISIONING / "dashboards" / "tritonize.yml").read_text())["providers"]
    mounts = {v["target"]: ROOT / v["source"] for v in compose["grafana"]["volumes"]}
    assert mounts[provider["options"]["path"]] == DASHBOARD.parent
    assert provider["allowUiUpdates"] is False
    home = compose["grafana"]["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == f"{provider['options']['path']}/{DASHBOARD.name}"


def test_compose_prometheus_config_is_the_rendering() -> None:
    assert (ROOT / mon.COMPOSE_CONFIG).read_text() == mon.compose_config(), (
        f"{mon.COMPOSE_CONFIG} drifted from {mon.TEMPLATE.relative_to(mon.TEMPLATE.parents[2])}: "
        f"python -m tritonize.runtime.monitoring > {mon.COMPOSE_CONFIG}"
    )


def test_promtool_accepts_the_compose_and_the_local_config(tmp_path: Path) -> None:
    promtool = need("promtool")
    local = tmp_path / "prometheus.yml"
    local.write_text(mon.render_config(["127.0.0.1:8002"], 0.5, written_by="test"))
    for config in (ROOT / mon.COMPOSE_CONFIG, local):
        result = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 0 and "SUCCESS" in result.stdout + result.stderr, result.stdout + result.stderr
    assert yaml.safe_load(local.read_text())["global"]["scrape_interval"] == "500ms"


def test_missing_prometheus_is_one_clear_line(tmp_path: Path) -> None:
    """Before the server starts: nothing is left running, nothing is written."""
    repo = tmp_path / "repo" / "m"
    repo.mkdir(parents=True)
    (tmp_path / "empty").mkdir()
    http, grpc, metrics, prom = process.free_ports(4)
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    env.pop("TRITONIZE_DEBUG", None)
    result = deploy("up", "--monitoring", "-r", str(repo.parent), "--run-dir", str(tmp_path / "run"),
                    "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                    "--prometheus-port", str(prom), env=env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: --monitoring runs a local Prometheus, but there is no `prometheus` on PATH",
        f"hint: {mon.INSTALL_HINT}  (as root; or: make system-deps)",
    ]
    assert not (tmp_path / "run" / f"local-{http}" / "server.json").exists()


def test_a_busy_prometheus_port_is_refused(tmp_path: Path) -> None:
    options = mon.MonitoringOptions(port=process.free_ports(1)[0], binary=sys.executable)  # any binary will do
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", options.port))
        blocker.listen()
        with pytest.raises(TritonizeError) as info:
            mon.LocalPrometheus(tmp_path, options).check(taken=(8000, 8001, 8002))
    assert "already in use" in info.value.message and "--prometheus-port" in info.value.hint
    with pytest.raises(TritonizeError, match="one of the server's ports"):
        mon.LocalPrometheus(tmp_path, mon.MonitoringOptions(port=8002, binary=sys.executable)).check((8000, 8002))
    with pytest.raises(TritonizeError, match="must be positive"):
        mon.LocalPrometheus(tmp_path, mon.MonitoringOptions(scrape_interval_s=0, binary=sys.executable)).check()


def test_a_prometheus_that_will_not_start_is_reported_with_its_log(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "prometheus"
    fake.write_text('#!/bin/sh\necho \'level=error msg="Error loading config" err="no such luck"\'\nexit 1\n')
    fake.chmod(0o755)
    prometheus = mon.LocalPrometheus(tmp_path, mon.MonitoringOptions(port=process.free_ports(1)[0], binary=str(fake)))
    with pytest.raises(TritonizeError) as info:
        prometheus.start("127.0.0.1:8002")
    assert info.value.message.startswith("Prometheus exited with code 1")
    assert "no such luck" in info.value.message and str(prometheus.log_file) in info.value.hint
    assert prometheus.state() is None  # nothing left for `down` to find


@pytest.mark.parametrize(("seconds", "text"), [(1, "1s"), (5.0, "5s"), (0.5, "500ms"), (2.25, "2250ms")])
def test_scrape_intervals_are_prometheus_durations(seconds: float, text: str) -> None:
    assert mon.duration(seconds) == text


# --------------------------------------------------------------------------- live


@dataclass
class Monitored:
    repository: Path
    name: str
    common: list[str]  # the deploy.py arguments that name this server
    grpc: str
    metrics: str
    prometheus: str
    directory: Path
    summary: str


@pytest.fixture(scope="module")
def monitored(tiny_embedding_repo, local_triton, tmp_path_factory):
    """`deploy.py local up --monitoring` in-process (its parser and dispatch), a 1 s scrape; `down` at the end."""
    from tritonize.cli import build_parser
    from tritonize.console import out
    from tritonize.runtime import cli as runtime_cli
    from tritonize.runtime.instance import instance_dir

    need("prometheus")
    http, grpc, metrics, prom = process.free_ports(4)
    run_dir = tmp_path_factory.mktemp("monitoring") / "run"
    common = ["--repository", str(tiny_embedding_repo.repository), "--run-dir", str(run_dir),
              "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    parser = build_parser()
    # No supervisor: its health checks would be traffic the counts below do not expect.
    up = parser.parse_args(["deploy", "local", "up", *common, "--monitoring", "--prometheus-port", str(prom),
                            "--scrape-interval", "1", "--no-supervise"])
    with out.capture() as captured:
        assert runtime_cli.run(up) == 0
    try:
        yield Monitored(
            repository=tiny_embedding_repo.repository, name=tiny_embedding_repo.name, common=common,
            grpc=f"127.0.0.1:{grpc}", metrics=f"http://127.0.0.1:{metrics}/metrics",
            prometheus=f"http://127.0.0.1:{prom}", directory=instance_dir(run_dir, http).resolve(),
            summary=captured.get(),
        )
    finally:
        runtime_cli.run(parser.parse_args(["deploy", "local", "down", *common]))


@pytest.mark.e2e
@pytest.mark.slow
def test_prometheus_sees_the_traffic_value_for_value(monitored: Monitored) -> None:
    from tritonize.client import ServerError, TextClient

    name, step = monitored.name, f"{monitored.name}_tokenizer"
    requests = [["hello world"], ["Ünïcödé café 🚀 ☃", "many words in a row " * 40],  # truncated at 64 tokens
                ["the quick brown fox", "a", "b c"]]
    refused = 2
    # `up` already sent one, its health check; the steps publish what they counted within PUBLISH_S.
    settled(lambda: {k: v for k, v in triton_page(monitored.metrics).items() if k[0].startswith("tritonize_")})
    before = triton_page(monitored.metrics)
    with TextClient(monitored.grpc, name) as client:
        for texts in requests:
            client.embed(texts)
        for _ in range(refused):
            with pytest.raises(ServerError):
                client.embed([""])
    counts: dict = {}
    chain.text_encoder(monitored.repository).encode_many(requests, counts=counts)  # one group per request
    assert counts["truncated"] == 1 and counts["unknown"] > 0  # the cases are exercised

    def key(metric: str, model: str, **labels: str) -> tuple:
        version = {} if metric.startswith("tritonize_") else {"version": "1"}
        return metric, tuple(sorted({"model": model, **version, **labels}.items()))

    texts = sum(len(r) for r in requests)
    sent = {
        key("nv_inference_request_success", name): len(requests),
        key("nv_inference_count", name): texts,
        # The local server's first step is the model step, which tokenizes (and refuses) itself.
        key("nv_inference_request_success", f"{name}_model"): len(requests) + refused,  # an error answer counts
        key("nv_inference_exec_count", f"{name}_model"): len(requests) + refused,  # one at a time: no batching
        key("nv_inference_count", f"{name}_model"): texts + refused,
        key("tritonize_inputs_rejected_total", step, reason="empty"): refused,
        **{key(COUNTED[k], step): v for k, v in counts.items()},
    }
    expected = {k: before.get(k, 0.0) + v for k, v in sent.items()}
    promql = f'{{job="{mon.JOB}", model=~"{name}.*"}}'
    deadline = time.monotonic() + 20
    while True:
        seen = series(monitored.prometheus, promql)
        if all(seen.get(k) == v for k, v in expected.items()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert {k: seen.get(k) for k in expected} == expected
    assert seen[key(COUNTED["texts"], step)] >= texts  # real values, not just presence
    failures = sum(v for (metric, labels), v in seen.items()
                   if metric == "nv_inference_request_failure" and ("model", name) in labels)
    assert failures >= refused  # Triton 2.51 counts a failed ensemble request twice
    p50 = query(monitored.prometheus, f'nv_inference_request_summary_us{{model="{name}", quantile="0.5"}}')
    assert p50 and float(p50[0]["value"][1]) > 0
    assert query(monitored.prometheus, f'up{{job="{mon.JOB}"}}')[0]["value"][1] == "1"
    shown = {f"{m}{{{','.join(f'{k}={v}' for k, v in labels if k != 'version')}}}": v
             for (m, labels), v in sorted(seen.items()) if (m, labels) in expected or m.endswith("_failure") and v}
    print("\nthrough Prometheus:", json.dumps(shown, indent=1))


@pytest.mark.e2e
@pytest.mark.slow
def test_every_dashboard_query_answers_through_prometheus(monitored: Monitored) -> None:
    from tritonize.client import TextClient

    with TextClient(monitored.grpc, monitored.name) as client:
        client.embed(["one more request, so that every rate has samples"])
    exposed = {name for name, _ in triton_page(monitored.metrics)}
    names_url = f"{monitored.prometheus}/api/v1/label/__name__/values"
    with urllib.request.urlopen(names_url, timeout=5) as resp:  # noqa: S310 - loopback
        stored = set(json.loads(resp.read())["data"])
    empty = {}
    for title, expr in exprs(dashboard()):
        names = metric_names(expr)
        assert names and names <= exposed, f"{title}: {names - exposed} not on Triton's metrics page"
        assert names <= stored, f"{title}: {names - stored} not in Prometheus"
        deadline = time.monotonic() + 10
        while not (result := query(monitored.prometheus, as_grafana_sends(expr))) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not result:
            empty[title] = expr
        else:
            models = {row["metric"].get("model") for row in result}
            assert models and None not in models, f"{title}: not per model: {result}"
    assert not empty, f"dashboard queries with no answer: {empty}"


@pytest.mark.e2e
@pytest.mark.slow
def test_up_runs_our_own_prometheus_on_loopback_with_the_admin_apis_off(monitored: Monitored) -> None:
    promtool = need("promtool")
    state = mon.LocalPrometheus(monitored.directory).running()
    assert state is not None
    port = monitored.prometheus.rsplit(":", 1)[1]
    config = monitored.directory / mon.DIRECTORY / mon.CONFIG_FILE
    assert state.command[1:] == [
        f"--config.file={config}",
        f"--storage.tsdb.path={monitored.directory / mon.DIRECTORY / mon.DATA_DIR}",
        f"--storage.tsdb.retention.time={mon.RETENTION}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    result = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert yaml.safe_load(config.read_text())["scrape_configs"][0]["static_configs"][0]["targets"] == [
        monitored.metrics.split("/")[2]]
    for path, refused in (("/-/reload", 403), ("/-/quit", 403), ("/api/v1/admin/tsdb/snapshot", 500)):
        request = urllib.request.Request(f"{monitored.prometheus}{path}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=5)  # noqa: S310
        assert info.value.code == refused, path
    # The summary: Prometheus's URL and a query to try, which answers.
    assert f"Prometheus {monitored.prometheus}" in monitored.summary
    curl = f"curl -sG {monitored.prometheus}/api/v1/query --data-urlencode 'query={mon.EXAMPLE_QUERY}'"
    assert curl in monitored.summary
    assert query(monitored.prometheus, mon.EXAMPLE_QUERY)


@pytest.mark.e2e
@pytest.mark.slow
def test_status_reports_prometheus_and_down_stops_it(monitored: Monitored) -> None:
    status = deploy("status", *monitored.common)
    assert status.returncode == 0, status.stdout + status.stderr
    line = next(line for line in status.stdout.splitlines() if line.startswith("monitoring: "))
    assert f"Prometheus {monitored.prometheus}" in line and line.endswith("target up"), line
    from tritonize.runtime.instance import read_instance

    pid = mon.LocalPrometheus(monitored.directory).running().pid
    server = read_instance(monitored.directory).pid
    down = deploy("down", *monitored.common)
    assert down.returncode == 0, down.stderr
    assert "Prometheus stopped" in down.stderr
    for child in (pid, server):  # both were started by this process: collect them
        assert process.start_ticks(child) is None or process.is_zombie(child)
        process.reap(child)
    assert mon.LocalPrometheus(monitored.directory).running() is None
    assert (monitored.directory / mon.DIRECTORY / mon.DATA_DIR).is_dir()  # its data stays
