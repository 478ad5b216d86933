"""The monitoring stack offline: the dashboard shows what operators need (queue against compute time per step,
batch size, request rate and errors, latency, the served steps' counters), the second what the models answer
(a heatmap per output statistic, drift, versions); the compose profile's Prometheus configuration and rules are
the templates' rendering; promtool accepts them, and its rule tests find the drift record equal to the KS
distance computed here and each alert firing where it should and nowhere else; a missing or failing
`prometheus` is one clear line.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from support.monitoring import (
    DASHBOARD,
    DASHBOARDS,
    OUTPUTS_DASHBOARD,
    ROOT,
    dashboard,
    deploy,
    exprs,
    metric_names,
    need,
    panels,
    recorded_names,
)
from tritonize import tasks
from tritonize.errors import TritonizeError
from tritonize.runtime import monitoring as mon
from tritonize.runtime import machine
from tritonize.serving import statistics
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


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_follows_the_data_source_and_model_variables(path: Path) -> None:
    dash = dashboard(path)
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
            # Scraped series (nv_*, tritonize_*) and recorded ones (level:tritonize_*:operations).
            selectors = re.findall(r"(?<![\w:])(?:\w+:)?(?:nv|tritonize)_[\w:]*(\{[^}]*\})?", t["expr"])
            assert selectors and all('model=~"$model"' in s for s in selectors), t["expr"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)) and dash["editable"] is False
    assert dash["templating"] == dashboard()["templating"]  # the same variables on every dashboard


def test_each_dashboard_has_its_own_uid_and_grafana_provisions_them_all() -> None:
    assert [dashboard(p)["uid"] for p in DASHBOARDS] == ["tritonize", "tritonize-outputs"]
    assert {p.name for p in DASHBOARD.parent.glob("*.json")} == {p.name for p in DASHBOARDS}


def test_the_outputs_dashboard_shows_each_distribution_its_drift_and_the_versions() -> None:
    dash = dashboard(OUTPUTS_DASHBOARD)
    by_panel = {p["title"]: p for p in panels(dash)}
    histograms = {n: s.help for n, s in tasks.statistics().items() if s.histogram}
    counters = {n for n, s in tasks.statistics().items() if not s.histogram}
    assert histograms and counters
    for name, help_text in histograms.items():  # a heatmap of each histogram's buckets over time
        (heatmap,) = [p for p in by_panel.values() if p["type"] == "heatmap" and help_text in p["description"]]
        (target,) = heatmap["targets"]
        assert target["format"] == "heatmap" and heatmap["options"]["calculate"] is False
        assert target["expr"] == f'sum by (le) (increase({name}_bucket{{model=~"$model"}}[$__rate_interval]))'
    read = set().union(*(metric_names(e) for _, e in exprs(dash)))
    assert counters <= read, counters - read
    assert recorded_names() <= read  # the drift scores
    served = {f"{n}_bucket" for n in histograms} | {f"{n}_count" for n in histograms}
    api = {"tritonize_api_requests_total", "tritonize_api_request_duration_seconds_bucket",
           "tritonize_api_shadow_agreement_bucket"}
    assert read <= served | counters | recorded_names() | api, read - served - api
    versions = [e for t, e in exprs(dash) if t.startswith(("API", "Shadow"))]
    assert len(versions) >= 4 and all("by (model, version" in e for e in versions)


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
        "python -m tritonize.runtime.monitoring"
    )


def test_promtool_accepts_the_compose_and_the_local_config(tmp_path: Path) -> None:
    promtool = need("promtool")
    local = mon.write_configuration(tmp_path, ["127.0.0.1:8002"], 0.5, written_by="test")
    assert (tmp_path / mon.RULES_FILE).read_text().splitlines()[3:] == mon.compose_rules().splitlines()[3:]
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
    http, grpc, metrics, prom = machine.free_ports(4)
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
    options = mon.MonitoringOptions(port=machine.free_ports(1)[0], binary=sys.executable)  # any binary will do
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
    prometheus = mon.LocalPrometheus(tmp_path, mon.MonitoringOptions(port=machine.free_ports(1)[0], binary=str(fake)))
    with pytest.raises(TritonizeError) as info:
        prometheus.start("127.0.0.1:8002")
    assert info.value.message.startswith("Prometheus exited with code 1")
    assert "no such luck" in info.value.message and str(prometheus.log_file) in info.value.hint
    assert prometheus.state() is None  # nothing left for `down` to find


@pytest.mark.parametrize(("seconds", "text"), [(1, "1s"), (5.0, "5s"), (0.5, "500ms"), (2.25, "2250ms")])
def test_scrape_intervals_are_prometheus_durations(seconds: float, text: str) -> None:
    assert mon.duration(seconds) == text


# --------------------------------------------------------------------------- rules: drift and alerts

STEP = "1m"  # the synthetic series' sample interval and the rules' evaluation interval in promtool's tests
MINUTES = 60  # how long each synthetic series runs


def test_compose_rules_are_the_rendering() -> None:
    assert (ROOT / mon.COMPOSE_RULES).read_text() == mon.compose_rules(), (
        f"{mon.COMPOSE_RULES} drifted from {mon.RULES_TEMPLATE.name}: python -m tritonize.runtime.monitoring")


def test_promtool_checks_the_rules_and_every_histogram_has_its_drift_record() -> None:
    promtool = need("promtool")
    result = subprocess.run([promtool, "check", "rules", str(ROOT / mon.COMPOSE_RULES)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
    groups = yaml.safe_load((ROOT / mon.COMPOSE_RULES).read_text())["groups"]
    records = [r for g in groups for r in g["rules"] if "record" in r]
    assert {r["labels"]["statistic"] for r in records} == set(mon.histograms()) > {statistics.TOKENS_PER_TEXT}
    assert {r["record"] for r in records} == {mon.DRIFT.record}
    assert {r["alert"] for g in groups for r in g["rules"] if "alert" in r} == {a.name for a in mon.ALERTS}


def series(name: str, labels: dict, per_step: float) -> dict:
    """A counter that grows by `per_step` every STEP, for MINUTES steps."""
    body = ",".join(f'{k}="{v}"' for k, v in {**labels, "job": mon.JOB, "instance": "triton:8002"}.items())
    return {"series": f"{name}{{{body}}}", "values": f"0+{per_step:g}x{MINUTES}"}


def gauge(name: str, labels: dict, value: float) -> dict:
    body = ",".join(f'{k}="{v}"' for k, v in {**labels, "job": mon.JOB, "instance": "triton:8002"}.items())
    return {"series": f"{name}{{{body}}}", "values": f"{value!r}x{MINUTES}"}


def histogram(name: str, labels: dict, bounds: list[float], rows: np.ndarray, le: str = "{:g}") -> list[dict]:
    """A histogram that records the same `rows` every STEP, its bucket bounds written as `le` formats them."""
    cumulative = [int((rows <= b).sum()) for b in bounds]
    buckets = [series(f"{name}_bucket", {**labels, "le": le.format(b)}, n) for b, n in zip(bounds, cumulative)]
    return [*buckets, series(f"{name}_bucket", {**labels, "le": "+Inf"}, len(rows)),
            series(f"{name}_count", labels, len(rows)), series(f"{name}_sum", labels, float(rows.sum()))]


def baseline(name: str, labels: dict, bounds: list[float], sample: np.ndarray) -> list[dict]:
    return [*(gauge(name + statistics.BASELINE_SUFFIX, {**labels, "le": f"{b:g}"}, float((sample <= b).mean()))
              for b in bounds), gauge(name + statistics.BASELINE_SUFFIX, {**labels, "le": "+Inf"}, 1.0)]


def promtool_test(tmp_path: Path, input_series: list[dict], **checks) -> None:
    """`promtool test rules` of the committed rules on `input_series`; `checks`: its alert_rule_test and
    promql_expr_test lists."""
    promtool = need("promtool")
    (tmp_path / "test.yml").write_text(yaml.safe_dump({
        "rule_files": [str(ROOT / mon.COMPOSE_RULES)],
        "evaluation_interval": STEP,
        "tests": [{"interval": STEP, "input_series": input_series, **checks}],
    }, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(tmp_path / "test.yml")], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_the_drift_record_is_the_binned_ks_distance_and_the_alert_fires_on_drift_alone(tmp_path: Path) -> None:
    """Token counts per text: a baseline sample, bounds at its quartiles' neighbourhood, and three windows that
    repeat one minute's rows: drawn from the baseline itself, from longer texts, and too few to judge."""
    rng = np.random.default_rng(7)
    name = "tritonize_tokens_per_text"
    sample = np.round(rng.lognormal(3.0, 0.5, 2000))
    bounds = [8.0, 16.0, 24.0, 32.0, 64.0]
    windows = {  # model -> (one minute's rows, how Prometheus stores the buckets' `le`)
        "steady": (rng.choice(sample, 40), "{:g}"),  # as Prometheus 2 stores Triton's page
        "longer": (np.round(rng.lognormal(3.4, 0.5, 40)), "{:.1f}"),  # as Prometheus 3 rewrites it: le="8.0"
        "quiet": (rng.choice(sample, 5), "{:g}"),  # 150 rows in the window: under DRIFT.min_rows
    }
    rows_per_window = {m: len(rows) * int(mon.DRIFT.window.rstrip("m")) for m, (rows, _) in windows.items()}
    assert rows_per_window["quiet"] < mon.DRIFT.min_rows <= rows_per_window["steady"]

    def ks(rows: np.ndarray) -> float:  # the two empirical distributions at the bounds, compared by numpy
        return float(max(abs((rows <= b).mean() - float((sample <= b).mean())) for b in bounds))

    expected = {m: ks(rows) for m, (rows, _) in windows.items()}
    assert expected["steady"] < mon.DRIFT.max_ks < expected["longer"]
    input_series = []
    for model, (rows, le) in windows.items():
        labels = {"model": model, "version": "1"}
        input_series += histogram(name, labels, bounds, rows, le) + baseline(name, labels, bounds, sample)
    at = f"{MINUTES - 5}m"
    labels = {"version": "1", "statistic": name}
    promtool_test(tmp_path, input_series, promql_expr_test=[
        {"expr": f"abs({mon.DRIFT.record} - on (model) group_left label_replace(vector({v!r}), \"model\", "
                 f"\"{m}\", \"\", \"\")) < bool 1e-9", "eval_time": at,
         "exp_samples": [{"labels": f"{{model=\"{m}\",version=\"1\",statistic=\"{name}\"}}", "value": 1}]}
        for m, v in expected.items() if m != "quiet"] + [
        {"expr": f'{mon.DRIFT.record}{{model="quiet"}}', "eval_time": at, "exp_samples": []},
    ], alert_rule_test=[{"eval_time": at, "alertname": "TritonizeOutputDrift", "exp_alerts": [{
        "exp_labels": {"severity": "warning", "model": "longer", **labels},
        "exp_annotations": {
            "summary": f"longer version 1: {name} drifted from its baseline",
            "description": f"Over the last {mon.DRIFT.window} the distribution of {name} is "
                           f"{expected['longer']:.2f} (Kolmogorov-Smirnov) from the baseline's, above "
                           f"{mon.DRIFT.max_ks:g}: the inputs or the model changed."},
    }]}])
    print(f"\nKS distances: {expected}")


def test_each_alert_fires_on_its_synthetic_series_and_stays_quiet_on_the_baseline(tmp_path: Path) -> None:
    """Per alert, a model that passes its bound ("loud"), one at a normal rate ("calm") and, where the bound is a
    share, one that passes it on too few requests to judge ("rare"). Counts grow by the stated amount a minute."""
    api = mon.API_REQUESTS
    input_series = [
        series(mon.TEXTS, {"model": "loud"}, 100), series(mon.TRUNCATED, {"model": "loud"}, 20),  # 20 % truncated
        series(mon.TEXTS, {"model": "calm"}, 100), series(mon.TRUNCATED, {"model": "calm"}, 2),
        series(mon.TEXTS, {"model": "rare"}, 1), series(mon.TRUNCATED, {"model": "rare"}, 1),  # 10 texts in 10 min
        series(mon.REFUSED, {"model": "loud", "reason": "empty"}, 6),  # 0.1 refused per text, over two reasons
        series(mon.REFUSED, {"model": "loud", "reason": "too_long"}, 4),
        series(mon.REFUSED, {"model": "calm", "reason": "empty"}, 1),
        # Triton: a step's backend failures; an ensemble's refusals (reason OTHER, counted twice) are no failure.
        series("nv_inference_request_success", {"model": "loud", "version": "1"}, 100),
        series("nv_inference_request_failure", {"model": "loud", "version": "1", "reason": "BACKEND"}, 5),
        series("nv_inference_request_success", {"model": "calm", "version": "1"}, 100),
        series("nv_inference_request_failure", {"model": "calm", "version": "1", "reason": "OTHER"}, 20),
        series("nv_inference_request_failure", {"model": "calm", "version": "1", "reason": "BACKEND"}, 0),
        # The API: 5xx against 4xx (the caller's fault, not the server's).
        series(api, {"route": "/v1/embeddings", "model": "loud", "status": "200"}, 100),
        series(api, {"route": "/v1/embeddings", "model": "loud", "status": "503"}, 3),
        series(api, {"route": "/v1/embeddings", "model": "calm", "status": "200"}, 100),
        series(api, {"route": "/v1/embeddings", "model": "calm", "status": "422"}, 30),
    ]
    at = f"{MINUTES - 5}m"

    def fires(alert: str, summary: str, description: str) -> dict:
        return {"eval_time": at, "alertname": alert, "exp_alerts": [{
            "exp_labels": {"severity": "warning", "model": "loud"},
            "exp_annotations": {"summary": summary, "description": description}}]}

    promtool_test(tmp_path, input_series, alert_rule_test=[
        fires("TritonizeTextsTruncated", "loud: many texts truncated",
              "20% of the texts were longer than the max length (the bound is 10%): the model saw only their "
              "first tokens."),
        fires("TritonizeInputsRefused", "loud: many requests refused",
              "0.10 requests refused (INVALID_ARG) per text accepted (the bound is 0.05): a client sends what "
              f"cannot be served; {mon.REFUSED} says why."),
        fires("TritonizeTritonFailures", "loud: requests failing in Triton",
              "4.762% of the requests failed in a backend or at a full queue (the bound is 1%)."),
        fires("TritonizeApiErrors", "loud: the HTTP API answers 5xx",
              "2.913% of the API's requests were answered 5xx (the bound is 1%)."),
        # Before the `for` has passed, nothing fires.
        {"eval_time": "4m", "alertname": "TritonizeTextsTruncated", "exp_alerts": []},
    ])
