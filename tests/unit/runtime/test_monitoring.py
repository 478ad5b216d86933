"""The monitoring stack offline: the dashboard shows what operators need (queue against compute time per step,
batch size, request rate and errors, latency, the served steps' counters); the compose profile's Prometheus
configuration is the template's rendering; promtool accepts it; a missing or failing `prometheus` is one clear
line.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from support.monitoring import DASHBOARD, ROOT, dashboard, deploy, exprs, metric_names, need, panels
from tritonize.errors import TritonizeError
from tritonize.runtime import monitoring as mon
from tritonize.runtime import process
from tritonize.serving.metrics import COUNTERS

PROVISIONING = ROOT / "monitoring" / "grafana" / "provisioning"
COMPOSE = ROOT / "docker-compose.yml"


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
