"""The dashboard of what the models answer, live: a Prometheus over the every-task stack (one local Triton and
the API), and each panel's query answering per model after traffic to every model: enough rows for the drift
record's minimum in its window."""

from __future__ import annotations

import json
import time
import urllib.request

from support.monitoring import OUTPUTS_DASHBOARD, dashboard, need, panels, unanswered
from support.task_stack import LATE_INTERACTION, MAX_TEXTS, MODELS
from tritonize import metrics_text, tasks
from tritonize.api.task_routes import routes_of
from tritonize.baseline import baseline_rows
from tritonize.client import TextClient
from tritonize.manifest import read_manifest
from tritonize.runtime import monitoring as mon
from tritonize.runtime import machine
from tritonize.serving.metrics import PUBLISH_S, STATISTICS_PUBLISH_S


def exposed(url: str) -> set[str]:
    """The metric names a metrics page shows (a histogram's series by their own names)."""
    return {s.name for s in metrics_text.samples(metrics_text.fetch(url))}


def stored(prometheus: str) -> set[str]:
    with urllib.request.urlopen(f"{prometheus}/api/v1/label/__name__/values", timeout=5) as resp:  # noqa: S310
        return set(json.loads(resp.read())["data"])


def test_every_panel_of_the_outputs_dashboard_answers_after_traffic(task_stack, tmp_path) -> None:
    need("prometheus")
    folders, endpoints, api = task_stack
    repository = folders["emb"].parent / "repo"
    [port] = machine.free_ports(1)
    prometheus = mon.LocalPrometheus(tmp_path, mon.MonitoringOptions(port=port, scrape_interval_s=1))
    url = prometheus.start(f"127.0.0.1:{endpoints.metrics_port}", api_target=api.url.split("://", 1)[1])
    try:
        assert prometheus.wait_scraped(20)  # before the traffic: the window's increase starts from a sample
        # ... of the API's series too, which it publishes at zero as it starts (its statistics of the graph layout)
        deadline = time.monotonic() + 20
        while "tritonize_api_in_flight" not in stored(url) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "tritonize_api_in_flight" in stored(url), "Prometheus never scraped the API"
        for name in ("emb", *MODELS, LATE_INTERACTION):
            task = tasks.of(read_manifest(repository, name).model.head)
            _, rows = baseline_rows(task, None)
            rows = rows if name == "emb" else rows[:2 * MAX_TEXTS]  # the embedder past the drift record's minimum
            if read_manifest(repository, name).options.tokenizer == "graph":
                # served in graphs alone: no Python step counts in Triton, the API counts what it answers
                routes = routes_of(read_manifest(repository, name).model.head)
                for (text,) in rows:
                    path, body = routes.api_sample(name, text)
                    assert api.call("POST", path, body)[0] == 200
                continue
            with TextClient(endpoints.grpc, name) as client:
                for k in range(0, len(rows), MAX_TEXTS):
                    client.infer(task.contract.request(rows[k:k + MAX_TEXTS]))
        for _ in range(3):  # the API's panels, per version
            status, _, _ = api.call("POST", "/v1/embeddings", {"model": "emb", "input": ["a text for the API"]})
            assert status == 200
        time.sleep(STATISTICS_PUBLISH_S + PUBLISH_S)  # the steps have published what they counted
        served = exposed(f"http://127.0.0.1:{endpoints.metrics_port}/metrics") | exposed(f"{api.url}/metrics")
        deadline = time.monotonic() + 20
        while not served | {mon.DRIFT.record} <= stored(url) and time.monotonic() < deadline:  # scraped, recorded
            time.sleep(0.5)
        dash = dashboard(OUTPUTS_DASHBOARD)
        # The shadow's panels answer only while a shadow runs (tests/e2e/test_rollout.py serves one).
        dash["panels"] = [p for p in panels(dash) if not p["title"].startswith("Shadow")]
        empty = unanswered(url, dash, served, wait_s=20)
        assert not empty, f"panels with no answer: {empty}"
    finally:
        prometheus.stop()
