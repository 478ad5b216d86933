"""The one reader of Prometheus's text format (tritonize/metrics_text.py): label values as Prometheus reads them,
names as the page wrote them, and the product's two readers (the bench's served counters, the drain's activity)
on a page served over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from support.loopback import serving
from tritonize import metrics_text
from tritonize.bench import server_counters
from tritonize.runtime.base import Endpoints, activity

# Triton writes its counters without `_total` (the parser's OpenMetrics form would add it) and a step's histogram
# as counters and a gauge (serving/statistics.py).
TRITON_PAGE = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="emb",version="1"} 5
nv_inference_request_success{model="emb_model",version="1"} 7
# HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="emb",reason="BACKEND",version="1"} 2
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="emb",version="1"} 3
nv_inference_pending_request_count{model="emb_model",version="1"} 1
# HELP tritonize_tokens_per_text_bucket Tokens per text
# TYPE tritonize_tokens_per_text_bucket counter
tritonize_tokens_per_text_bucket{le="8",model="emb"} 4
tritonize_tokens_per_text_bucket{le="+Inf",model="emb"} 6
# HELP tritonize_tokens_per_text_sum Tokens per text, summed
# TYPE tritonize_tokens_per_text_sum gauge
tritonize_tokens_per_text_sum{model="emb"} 41.5
# HELP tritonize_texts_total Texts tokenized
# TYPE tritonize_texts_total counter
tritonize_texts_total{model="emb_tokenizer"} 6
tritonize_texts_total{model="other_tokenizer"} 100
# HELP tritonize_inputs_rejected_total Inputs refused
# TYPE tritonize_inputs_rejected_total counter
tritonize_inputs_rejected_total{model="emb_tokenizer",reason="empty"} 2
tritonize_inputs_rejected_total{model="emb_tokenizer",reason="too_long"} 1
tritonize_inputs_rejected_total{model="emb_tokenizer",reason="too_long, by far"} 4
tritonize_inputs_rejected_total{model="a,b_tokenizer",reason="empty"} 9
"""


def test_a_label_value_with_a_comma_and_an_escaped_quote_reads_whole() -> None:
    """Splitting the labels on commas (the bench's old reader) cut `a, "b"` in two and kept the escapes."""
    registry = CollectorRegistry()
    Counter("tritonize_inputs_rejected", "refused", ["model", "reason"], registry=registry).labels(
        'emb,tokenizer', 'bad "utf-8", twice\\').inc(3)
    page = generate_latest(registry).decode()
    assert 'reason="bad \\"utf-8\\", twice\\\\"' in page  # the page escapes as the format says
    [sample] = [s for s in metrics_text.samples(page) if s.name == "tritonize_inputs_rejected_total"]
    assert sample.labels == {"model": "emb,tokenizer", "reason": 'bad "utf-8", twice\\'}
    assert sample.value == 3.0
    assert metrics_text.value([sample], "tritonize_inputs_rejected_total", model="emb,tokenizer",
                              reason='bad "utf-8", twice\\') == 3.0
    # A brace inside a value ends nothing either.
    [braced] = metrics_text.samples('x{route="/v1/{id}",le="0.5"} 2\n')
    assert braced.labels == {"route": "/v1/{id}", "le": "0.5"} and braced.name == "x"


def test_names_are_the_pages_own_and_types_are_as_declared() -> None:
    found = metrics_text.samples(TRITON_PAGE)
    names = {s.name for s in found}
    assert "nv_inference_request_success" in names and "nv_inference_request_success_total" not in names
    assert {"tritonize_tokens_per_text_bucket", "tritonize_texts_total", "tritonize_inputs_rejected_total"} <= names
    kinds = metrics_text.kinds(TRITON_PAGE)
    assert kinds["nv_inference_request_success"] == "counter"
    assert kinds["tritonize_texts_total"] == "counter"
    assert kinds["tritonize_tokens_per_text_sum"] == "gauge"
    assert kinds["nv_inference_pending_request_count"] == "gauge"
    bucket = metrics_text.select(found, "tritonize_tokens_per_text_bucket", le="+Inf")
    assert [s.value for s in bucket] == [6.0]
    assert bucket[0].key == ("tritonize_tokens_per_text_bucket", (("le", "+Inf"), ("model", "emb")))


def test_total_sums_the_series_that_carry_the_labels_and_value_wants_exactly_one() -> None:
    found = metrics_text.samples(TRITON_PAGE)
    assert metrics_text.total(found, "nv_inference_request_success") == 12.0
    assert metrics_text.total(found, "nv_inference_request_success", model="emb") == 5.0
    assert metrics_text.total(found, "nv_inference_request_success", model="nowhere") == 0.0
    assert metrics_text.total(found, "tritonize_inputs_rejected_total", model="emb_tokenizer") == 7.0
    assert metrics_text.value(found, "tritonize_inputs_rejected_total", model="emb_tokenizer", reason="empty") == 2.0
    with pytest.raises(LookupError, match='no series tritonize_inputs_rejected_total{model="emb_tokenizer"}'):
        metrics_text.value(found, "tritonize_inputs_rejected_total", model="emb_tokenizer")  # a label short


@contextmanager
def served(page: str) -> Iterator[str]:
    """`page` on a loopback /metrics, as host:port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            body = page.encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    with serving(Handler) as address:
        yield address


def test_the_bench_and_the_drain_read_a_served_page() -> None:
    """The served steps' counters of the measured models only, rejections by reason (one with a comma, and a
    model whose name holds one); the drain's waiting and finished requests over every model."""
    with served(TRITON_PAGE) as address:
        counted = server_counters.served_counters(address, models=["emb_tokenizer"])
        assert counted == {"tritonize_texts_total": 6.0, "tritonize_inputs_rejected_total/empty": 2.0,
                           "tritonize_inputs_rejected_total/too_long": 1.0,
                           "tritonize_inputs_rejected_total/too_long, by far": 4.0}
        assert server_counters.served_counters(f"http://{address}/metrics", models=["a,b_tokenizer"]) == {
            "tritonize_inputs_rejected_total/empty": 9.0}
        host, port = address.split(":")
        endpoints = Endpoints(host=host, http_port=1, grpc_port=1, metrics_port=int(port))
        assert activity(endpoints) == (4, 14)  # pending 3 + 1; successes 5 + 7 and failures 2


def test_a_histogram_written_by_prometheus_client_keeps_its_series_names() -> None:
    """The API's own page: a histogram's _bucket, _count and _sum, a counter's _total (and _created)."""
    registry = CollectorRegistry()
    Histogram("tritonize_api_request_duration_seconds", "latency", ["route"], buckets=(0.1, 1.0),
              registry=registry).labels("/v1/embeddings").observe(0.5)
    found = metrics_text.samples(generate_latest(registry).decode())
    assert {s.name for s in found} >= {"tritonize_api_request_duration_seconds_bucket",
                                       "tritonize_api_request_duration_seconds_count",
                                       "tritonize_api_request_duration_seconds_sum"}
    assert metrics_text.value(found, "tritonize_api_request_duration_seconds_bucket", route="/v1/embeddings",
                              le="1.0") == 1.0
    assert metrics_text.value(found, "tritonize_api_request_duration_seconds_bucket", route="/v1/embeddings",
                              le="0.1") == 0.0
