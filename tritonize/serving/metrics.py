"""What the served steps count, on Triton's metrics port: texts, tokens, padding, truncation, rejections.

Served: copied verbatim next to the steps that import it. Inside Triton the
counters are the Python backend's metrics API (`pb_utils.MetricFamily`), so
they appear beside Triton's own `nv_*` metrics; outside Triton (tests, the
benchmark's floor) every call is a no-op. Names follow Prometheus
conventions: `tritonize_` prefix, `_total` for counters, the unit in the name.
Every series carries the step's model name as `model`.

Counts are published to Triton within `PUBLISH_S` of being made, not as they
are made: each increment is a round trip to the server process, and a round
trip per counter per execute(), on the threads that answer requests, cost
the server process CPU on every request and 4-13% of the throughput at
concurrency 1 (docs/benchmark.md).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: nothing to export to
    pb_utils = None

# The parameter naming the `model` label, where it differs from the step's own name: the fused step
# counts under the tokenizer step's name, so the series are the same wherever the tokenizer runs.
METRICS_MODEL = "metrics_model"

# name -> help text; every one a counter.
COUNTERS = {
    "tritonize_texts_total": "Texts the step accepted (a pair counts once).",
    "tritonize_tokens_total": "Tokens the texts became, special tokens included, after truncation.",
    "tritonize_padded_tokens_total": "Tokens the model step computes for them: padded to the bucket.",
    "tritonize_texts_truncated_total": "Texts longer than the max length, truncated (or split into windows).",
    "tritonize_unknown_tokens_total": "Tokens the tokenizer could only map to its unknown token.",
    "tritonize_inputs_rejected_total": "Requests refused with INVALID_ARG, by reason.",
    "tritonize_windows_total": "Question-answering windows sent to the model step.",
    "tritonize_entities_total": "Entities the token-classification step returned.",
    "tritonize_graph_runs_total": "Graph runs of the local server's one step (each runs the requests waiting, up to max_batch_size rows).",
    "tritonize_graph_texts_total": "Texts those graph runs carried: over the runs, the graph's batch size.",
    "tritonize_queue_full_total": "Requests refused before their step's work (503): at the local server's one step's "
                                  "queue bound, or by a tokenizer step ahead of a full model step.",
}
# How long counts wait to be published together (seconds): one round trip per series that moved, at most this often.
# A reader that needs every count so far reads again after this (bench.server_counters.settled).
PUBLISH_S = 0.1
# How long the output statistics' counts wait (seconds): a histogram is a dozen series, each its own round trip,
# and every 0.1 s that cost a fused step at concurrency 1 about 9% of its throughput (docs/benchmark.md); a
# dashboard scrapes every few seconds. A reader that needs every count so far reads again after this.
STATISTICS_PUBLISH_S = 1.0
REASONS = ("too_large", "too_long", "invalid_utf8", "empty", "no_elements", "rows_mismatch", "unknown_form",
           "tokenizer")
# What the steps count in one execute() (their `counts` dicts) -> the counter each key feeds.
COUNTED = {
    "texts": "tritonize_texts_total",
    "tokens": "tritonize_tokens_total",
    "padded": "tritonize_padded_tokens_total",
    "truncated": "tritonize_texts_truncated_total",
    "unknown": "tritonize_unknown_tokens_total",
    "windows": "tritonize_windows_total",
    "entities": "tritonize_entities_total",
    "runs": "tritonize_graph_runs_total",
    "run_texts": "tritonize_graph_texts_total",
    "queue_full": "tritonize_queue_full_total",
}


class StepMetrics:
    """One step's counters. Families are kept on the object: a family that is dropped fails later updates.

    `record` and `rejected` only add to what is pending; a thread of the step's own publishes it every
    PUBLISH_S while there is any, so no request waits on a round trip to the server for a counter."""

    def __init__(self, model: str, enabled: bool = True):
        self.enabled = enabled and pb_utils is not None and hasattr(pb_utils, "MetricFamily")
        self._families, self._series, self._gauges = {}, {}, []
        self._pending: Counter = Counter()  # series key -> count not yet published
        self._pending_slow: Counter = Counter()  # the same, of series published every STATISTICS_PUBLISH_S
        self._slow_due = 0.0  # when the slow series are published next (monotonic)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        if not self.enabled:
            return
        for name, description in COUNTERS.items():
            family = self._family(name, description, "COUNTER")
            if name != "tritonize_inputs_rejected_total":
                self._series[name] = family.Metric(labels={"model": model})
        for reason in REASONS:
            self._series[("rejected", reason)] = self._families["tritonize_inputs_rejected_total"].Metric(
                labels={"model": model, "reason": reason})
        self._publisher = threading.Thread(target=self._publish_loop, name="tritonize-metrics", daemon=True)
        self._publisher.start()

    def record(self, counts: dict) -> None:
        """Add one execute()'s counts (keys of COUNTED)."""
        if self.enabled:
            self._add([(COUNTED[key], value) for key, value in counts.items() if value])

    def rejected(self, reason: str) -> None:
        if self.enabled:
            self._add([(("rejected", reason if reason in REASONS else "tokenizer"), 1)])

    def declare(self, name: str, description: str, labels: dict[str, str], key: str | None = None,
                kind: str = "COUNTER") -> None:
        """A series `name{labels}` beside the step's own, fed by `add` under (name, key); created once (the step's
        output statistics, serving/statistics.py). A GAUGE takes steps of either sign: Triton refuses a counter's
        negative step, and in Triton 2.51 that refusal's way back to the step can abort the server."""
        if self.enabled and (name, key) not in self._series:
            self._series[(name, key)] = self._family(name, description, kind).Metric(labels=labels)

    def set_gauge(self, name: str, description: str, labels: dict[str, str], value: float) -> None:
        """A gauge set once, at load (a baseline): one round trip, on the step's own thread."""
        if self.enabled:
            gauge = self._family(name, description, "GAUGE").Metric(labels=labels)
            gauge.set(float(value))
            self._gauges.append(gauge)  # a metric that is dropped leaves the server's registry

    def add(self, items: list) -> None:
        """Add to declared series, [((name, key), value)], published within STATISTICS_PUBLISH_S."""
        if self.enabled and items:
            with self._lock:
                first = not self._pending_slow
                if first:
                    self._slow_due = time.monotonic() + STATISTICS_PUBLISH_S
                for key, value in items:
                    self._pending_slow[key] += value
            if first:  # the publisher waits until they are due; later counts join them without waking it
                self._wake.set()

    def warn(self, message: str) -> None:
        if self.enabled:
            pb_utils.Logger.log_warn(f"tritonize metrics: {message}")

    def _family(self, name: str, description: str, kind: str):
        if name not in self._families:
            self._families[name] = pb_utils.MetricFamily(name=name, description=description,
                                                         kind=getattr(pb_utils.MetricFamily, kind))
        return self._families[name]

    def close(self) -> None:
        """Publish what is pending and stop the publisher (the step's finalize: before its stub goes)."""
        if self.enabled and not self._closed:
            self._closed = True
            self._wake.set()
            self._publisher.join(timeout=2 * PUBLISH_S + 1.0)
            self.publish()

    def publish(self, slow: bool = True) -> None:
        """What is pending; the slow series too where `slow` (or they are due)."""
        with self._lock:
            pending, self._pending = self._pending, Counter()
            if slow or time.monotonic() >= self._slow_due:
                pending.update(self._pending_slow)
                self._pending_slow = Counter()
        for key, value in pending.items():
            try:
                self._series[key].increment(float(value))
            except Exception as exc:  # noqa: BLE001 - a counter must not stop the others, nor the step
                pb_utils.Logger.log_warn(f"tritonize metrics: {value:g} not added to {key}: {exc}")

    def _add(self, items: list) -> None:
        if items:
            with self._lock:
                for key, value in items:
                    self._pending[key] += value
            self._wake.set()

    def _publish_loop(self) -> None:
        while not self._closed:
            with self._lock:
                wait = max(0.0, self._slow_due - time.monotonic()) if self._pending_slow else None
            self._wake.wait(wait)
            if self._closed:
                return  # close() publishes the rest
            self._wake.clear()  # what is added from here on wakes the next round
            time.sleep(PUBLISH_S)  # gather the counts of the next executes into one round trip each
            self.publish(slow=False)
