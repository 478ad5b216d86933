"""Admission ahead of the tokenizer (serving/admission.py): where it finds Triton's metrics, how it reads them, and
what it admits from what it read. The e2e test (tests/e2e/test_reliability.py) runs it in the real Triton under
four times the capacity; here its metrics endpoint is a plain HTTP server that answers Triton's text."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tritonize.runtime.base import ServerOptions
from tritonize.runtime.container import triton_command
from tritonize.serving.admission import (ADMIT_BEHIND, ADMIT_BOUND, ADMIT_BUDGET_US, FILL, QueueView, metrics_address,
                                        sample_sum)

# As Triton 2.51 writes it (a repository whose model step was loaded in versions 1 and 2).
METRICS = b"""# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="minilm",version="1"} 940
nv_inference_request_success{model="minilm_model",version="1"} 900
nv_inference_request_success{model="minilm_model",version="2"} 40
nv_inference_request_success{model="minilm_model_b",version="1"} 7
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="minilm_tokenizer",version="1"} 3
nv_inference_pending_request_count{model="minilm_model",version="1"} 12
"""


def cmdline(args) -> bytes:
    return b"\0".join(a.encode() for a in args) + b"\0"


def test_the_metrics_address_is_read_from_the_servers_command_line() -> None:
    ports = {"http": 8000, "grpc": 8001, "metrics": 9102}
    inside = triton_command(ServerOptions(), ports=ports)  # metrics on every interface of the container
    assert metrics_address(cmdline(inside)) == ("127.0.0.1", 9102)
    bound = triton_command(ServerOptions(), ports=ports, address="10.1.2.3")
    assert metrics_address(cmdline(bound)) == ("10.1.2.3", 9102)
    assert metrics_address(cmdline(["/opt/tritonserver/bin/tritonserver", "--metrics-port", "8102"])) == (
        "127.0.0.1", 8102)
    assert metrics_address(cmdline(["tritonserver", "--model-repository=/m"])) == ("127.0.0.1", 8002)


@pytest.mark.parametrize("args", [["tritonserver", "--allow-metrics=false"], ["tritonserver", "--allow-metrics", "0"],
                                  ["python", "-m", "pytest"], []])
def test_no_address_where_the_server_publishes_no_metrics_or_is_not_triton(args) -> None:
    assert metrics_address(cmdline(args)) is None


def test_a_models_samples_are_summed_over_its_versions_and_no_other_model() -> None:
    text = b"\n" + METRICS
    assert sample_sum(text, "nv_inference_request_success", "minilm_model") == 940
    assert sample_sum(text, "nv_inference_pending_request_count", "minilm_model") == 12
    assert sample_sum(text, "nv_inference_pending_request_count", "minilm") is None


class Metrics(BaseHTTPRequestHandler):
    body = METRICS
    reads = 0

    def do_GET(self):
        type(self).reads += 1
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    Metrics.reads = 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_a_lone_request_reads_nothing_and_requests_together_start_the_reads(endpoint) -> None:
    view = QueueView("127.0.0.1", endpoint, "minilm_model", 1.0, 512)
    try:
        assert view.admit(1) == 1
        time.sleep(0.3)
        assert Metrics.reads == 0 and view.pending is None
        assert view.admit(2) == 2  # nothing read yet: every request is admitted
        deadline = time.monotonic() + 5
        while view.pending is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert view.pending == 12 and Metrics.reads >= 1
    finally:
        view.close()


def test_what_is_admitted_follows_the_queue_and_the_rate_it_drains_at() -> None:
    view = QueueView("127.0.0.1", 9, "minilm_model", 1.0, 64)  # nothing listens: only what _observe is told
    view.close()
    assert view.admit(100) == 100  # nothing read: Triton's own bound decides
    view._observe(0.0, 40, 0)  # a queue, and no rate yet: the bound admits
    assert view.admit(30) == 24 and view.admit(1) == 0
    for step in range(1, 12):  # busy for 1.1 s at 50 answers a second
        view._observe(0.1 * step, 30, 5 * step)
    assert view.rate() == pytest.approx(50)
    assert view.admit(20) == int(FILL * 1.0 * 50) - 30 and view.admit(5) == 0
    assert "minilm_model's queue holds about 40 requests, about 0.8 s of work" in view.message()
    view._observe(1.2, 0, 60)  # the queue emptied: room again
    assert view.admit(3) == 3


def test_under_a_light_load_the_rate_is_not_known_and_a_burst_is_admitted() -> None:
    view = QueueView("127.0.0.1", 9, "minilm_model", 1.0, 512)
    view.close()
    for step in range(30):  # 10 answers a second, the queue empty at every read
        view._observe(0.1 * step, 0, step)
    assert view.rate() is None
    assert view.admit(512) == 512


def test_a_step_admits_only_where_its_parameters_ask_and_the_server_publishes_metrics(tmp_path) -> None:
    asked = {ADMIT_BEHIND: "minilm_model", ADMIT_BUDGET_US: "500000", ADMIT_BOUND: "750"}
    server, other = tmp_path / "server", tmp_path / "other"
    server.write_bytes(cmdline(["/opt/tritonserver/bin/tritonserver", "--metrics-port=9", "--metrics-address=0.0.0.0"]))
    other.write_bytes(cmdline(["python", "-m", "pytest"]))
    assert QueueView.of_step({}, server) is None  # the fused step, or a model step without a bound
    assert QueueView.of_step(asked, other) is None  # outside Triton
    assert QueueView.of_step(asked, tmp_path / "gone") is None
    view = QueueView.of_step(asked, server)
    try:
        assert (view.host, view.port, view.model, view.budget_s, view.bound) == ("127.0.0.1", 9, "minilm_model", 0.5, 750)
    finally:
        view.close()
