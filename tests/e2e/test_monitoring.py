"""The monitoring stack live: one server and one Prometheus for the module, started the way `deploy.py local
up --monitoring` starts them. Prometheus's HTTP API shows the traffic sent, value for value; every dashboard
query answers through it; `down` stops both.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from support.monitoring import dashboard, deploy, need, query, unanswered
from tritonize import chain, metrics_text
from tritonize.bench.server_counters import settled
from tritonize.runtime import monitoring as mon
from tritonize.runtime import machine
from tritonize.serving import statistics
from tritonize.serving.metrics import COUNTED


def series(prometheus: str, promql: str) -> dict[tuple[str, tuple], float]:
    """(metric name, the other labels but job and instance) -> value."""
    found = {}
    for row in query(prometheus, promql):
        labels = {k: v for k, v in row["metric"].items() if k not in ("__name__", "job", "instance")}
        found[(row["metric"].get("__name__", ""), tuple(sorted(labels.items())))] = float(row["value"][1])
    return found


def triton_page(metrics_url: str) -> dict[tuple[str, tuple], float]:
    """The same keys, read from Triton's own metrics page."""
    return {s.key: s.value for s in metrics_text.samples(metrics_text.fetch(metrics_url))}


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
def monitored(tiny_python_repo, local_triton, tmp_path_factory):
    """`deploy.py local up --monitoring` in-process (its parser and dispatch), a 1 s scrape; `down` at the end."""
    from tritonize.cli import build_parser
    from tritonize.console import out
    from tritonize.runtime import cli as runtime_cli
    from tritonize.runtime.instance import instance_dir

    need("prometheus")
    http, grpc, metrics, prom = machine.free_ports(4)
    run_dir = tmp_path_factory.mktemp("monitoring") / "run"
    common = ["--repository", str(tiny_python_repo.repository), "--run-dir", str(run_dir),
              "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics)]
    parser = build_parser()
    # No supervisor: its health checks would be traffic the counts below do not expect.
    up = parser.parse_args(["deploy", "local", "up", *common, "--monitoring", "--prometheus-port", str(prom),
                            "--scrape-interval", "1", "--no-supervise"])
    with out.capture() as captured:
        assert runtime_cli.run(up) == 0
    try:
        yield Monitored(
            repository=tiny_python_repo.repository, name=tiny_python_repo.name, common=common,
            grpc=f"127.0.0.1:{grpc}", metrics=f"http://127.0.0.1:{metrics}/metrics",
            prometheus=f"http://127.0.0.1:{prom}", directory=instance_dir(run_dir, http).resolve(),
            summary=captured.get(),
        )
    finally:
        runtime_cli.run(parser.parse_args(["deploy", "local", "down", *common]))


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


@pytest.mark.slow
def test_every_dashboard_query_answers_through_prometheus(monitored: Monitored) -> None:
    from tritonize.client import TextClient

    with TextClient(monitored.grpc, monitored.name) as client:
        client.embed(["one more request, so that every rate has samples"])
    exposed = {name for name, _ in triton_page(monitored.metrics)}
    empty = unanswered(monitored.prometheus, dashboard(), exposed)
    assert not empty, f"dashboard queries with no answer: {empty}"


@pytest.mark.slow
def test_drift_crosses_its_threshold_on_shifted_texts_then_falls_back(monitored: Monitored) -> None:
    """The drift record's expression as rules.yml writes it, over a window this test can wait for (the shipped
    one is 30 minutes): the texts the baseline was recorded on stay under the threshold, very short texts in
    other languages cross it, and the baseline's texts again bring it back under."""
    from tritonize import tasks
    from tritonize.baseline import baseline_rows
    from tritonize.client import TextClient
    from tritonize.manifest import read_manifest

    drift = mon.Drift(window="6s", min_rows=100)
    expressions = mon.drift_expressions(drift)
    statistic = statistics.TOKENS_PER_TEXT
    _, rows = baseline_rows(tasks.of(read_manifest(monitored.repository).model.head), None)
    quiet = [row[0] for row in rows]
    shifted = ["日本語", "bonjour", "¿qué?", "Привет", "你好", "ok", "ja", "oui"] * 30

    def distance_after(texts: list[str]) -> dict[str, float]:
        with TextClient(monitored.grpc, monitored.name) as client:
            for k in range(0, len(texts), 16):
                client.embed(texts[k:k + 16])
        time.sleep(2.5)  # two scrapes
        found = {}
        for name, promql in expressions.items():
            for row in query(monitored.prometheus, promql):
                if row["metric"].get("model") == monitored.name:
                    found[name] = float(row["value"][1])
        return found

    def window_passed() -> None:  # the next phase's window holds its texts alone
        time.sleep(int(drift.window.removesuffix("s")) + 1)

    phases = {"baseline": distance_after(quiet)}
    window_passed()
    phases["shifted"] = distance_after(shifted)
    window_passed()
    phases["again"] = distance_after(quiet)
    print("\nKS distance per phase:", json.dumps(phases, indent=1))
    assert phases["baseline"][statistic] < drift.max_ks < phases["shifted"][statistic]
    assert phases["again"][statistic] < drift.max_ks
    assert set(phases["shifted"]) == {statistic, "tritonize_output_centroid_similarity"}  # the embedder's two


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
    # The rules beside the configuration: the compose profile's, loaded and evaluated without error.
    assert (config.parent / mon.RULES_FILE).read_text().splitlines()[3:] == mon.compose_rules().splitlines()[3:]
    deadline = time.monotonic() + 10
    while True:
        with urllib.request.urlopen(f"{monitored.prometheus}/api/v1/rules", timeout=5) as resp:  # noqa: S310
            rules = [r for g in json.loads(resp.read())["data"]["groups"] for r in g["rules"]]
        health = {(r["name"], r.get("labels", {}).get("statistic")): r["health"] for r in rules}
        if set(health.values()) == {"ok"} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(health) == len(mon.ALERTS) + len(mon.histograms())
    assert set(health.values()) == {"ok"}, {k: (r["health"], r.get("lastError")) for k, r in zip(health, rules)}
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
        assert machine.start_ticks(child) is None or machine.is_zombie(child)
        machine.reap(child)
    assert mon.LocalPrometheus(monitored.directory).running() is None
    assert (monitored.directory / mon.DIRECTORY / mon.DATA_DIR).is_dir()  # its data stays
