"""What the server counted during a measured run: deltas of Triton's model statistics (/v2/models/stats) per
model, and the served steps' own counters from /metrics.

For each step (tokenizer, model) and the ensemble: requests, executions, the
average time spent queued and computing per request, and the average batch
formed (inference_count / execution_count). Also the padding waste of the
model step, counted by replaying the served regrouping code on batches of
the observed size.
"""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Callable, TypeVar

import numpy as np

from .. import metrics_text
from ..serving.metrics import PUBLISH_S

T = TypeVar("T")


@dataclass(frozen=True)
class StepCounters:
    """One model's work during a run; times are averages per request, in ms."""

    name: str
    requests: int
    executions: int
    inferences: int
    success_ms: float  # time in this model, queue included (the ensemble: end to end in the server)
    queue_ms: float
    compute_ms: float  # input + infer + output
    infer_ms: float
    # Total time the model's instances spent executing batches (input + infer + output of each execution, from
    # Triton's batch statistics): the model step's own work, whatever the batch sizes.
    busy_ms: float = 0.0

    @property
    def avg_batch(self) -> float:
        return self.inferences / self.executions if self.executions else 0.0

    def to_dict(self) -> dict:
        d = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        d["avg_batch"] = round(self.avg_batch, 2)
        return d


def fetch(http_url: str, timeout_s: float = 5.0) -> dict[str, dict]:
    """Raw statistics of every model, keyed by name."""
    base = http_url if http_url.startswith(("http://", "https://")) else f"http://{http_url}"
    with urllib.request.urlopen(f"{base.rstrip('/')}/v2/models/stats", timeout=timeout_s) as resp:  # noqa: S310
        data = json.loads(resp.read())
    return {m["name"]: m for m in data.get("model_stats", [])}


def _get(model_stats: dict, phase: str) -> tuple[int, int]:
    entry = model_stats.get("inference_stats", {}).get(phase, {})
    return int(entry.get("count", 0)), int(entry.get("ns", 0))


def busy_ns(model_stats: dict) -> int:
    """Nanoseconds a model's instances spent executing, over every batch size."""
    return sum(int(b.get(phase, {}).get("ns", 0)) for b in model_stats.get("batch_stats", [])
               for phase in ("compute_input", "compute_infer", "compute_output"))


def delta(before: dict, after: dict, name: str) -> StepCounters:
    """What `name` did between two snapshots."""
    b, a = before.get(name, {}), after.get(name, {})

    def d(phase: str) -> tuple[int, int]:
        (cb, nb), (ca, na) = _get(b, phase), _get(a, phase)
        return ca - cb, na - nb

    def avg_ms(phase: str) -> float:
        count, ns = d(phase)
        return ns / count / 1e6 if count else 0.0

    requests, _ = d("success")
    return StepCounters(
        name=name,
        requests=requests,
        executions=int(a.get("execution_count", 0)) - int(b.get("execution_count", 0)),
        inferences=int(a.get("inference_count", 0)) - int(b.get("inference_count", 0)),
        success_ms=avg_ms("success"),
        queue_ms=avg_ms("queue"),
        compute_ms=avg_ms("compute_input") + avg_ms("compute_infer") + avg_ms("compute_output"),
        infer_ms=avg_ms("compute_infer"),
        busy_ms=(busy_ns(a) - busy_ns(b)) / 1e6,
    )


class Snapshots:
    """Take a snapshot before and after a run; deltas for the ensemble and its steps."""

    def __init__(self, http_url: str, names: list[str]):
        self.http_url, self.names = http_url, names
        self.before: dict[str, dict] = {}

    def start(self, settle_s: float = 1.0, quiet_s: float = 0.05) -> None:
        """Snapshot once the counts stop moving: Triton counts the warm-up's last requests just after
        their responses leave, so a snapshot taken at once can miss them and charge them to the run."""
        deadline = time.monotonic() + settle_s
        before = fetch(self.http_url)
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            again = fetch(self.http_url)
            if delta(before, again, self.names[0]).requests == 0:
                break
            before = again
        self.before = before

    def finish(self, expected: int | None = None, settle_s: float = 1.0) -> dict[str, StepCounters]:
        """Deltas since `start`. Triton counts a request just after its response leaves, so wait
        (at most `settle_s`) until the ensemble has counted the `expected` successful requests."""
        deadline = time.monotonic() + settle_s
        while True:
            after = fetch(self.http_url)
            deltas = {n: delta(self.before, after, n) for n in self.names}
            if expected is None or deltas[self.names[0]].requests >= expected or time.monotonic() >= deadline:
                return deltas
            time.sleep(0.01)


def overhead_breakdown(client_ms: float, ensemble: StepCounters, steps: list[StepCounters]) -> dict[str, float]:
    """Where a request's mean latency goes: steps' queue and compute, ensemble hops, client and network."""
    queue = sum(s.queue_ms for s in steps)
    compute = sum(s.compute_ms for s in steps)
    in_steps = sum(s.success_ms for s in steps)
    return {
        "client_mean_ms": round(client_ms, 3),
        "server_ms": round(ensemble.success_ms, 3),
        "steps_queue_ms": round(queue, 3),
        "steps_compute_ms": round(compute, 3),
        # Ensemble scheduling between the steps, outside any step's own timing.
        "ensemble_hops_ms": round(max(0.0, ensemble.success_ms - in_steps), 3),
        # Protocol, (de)serialisation, Triton's frontend threads and the client itself.
        "outside_server_ms": round(max(0.0, client_ms - ensemble.success_ms), 3),
    }


def padding_waste(token_counts: list[int], batch: float, runner) -> dict[str, float]:
    """Padded tokens over real tokens when rows arrive in order, `batch` at a time, and the served
    OnnxRunner regroups them (its own plan, as the generated config sets it); the model is not run."""
    size = max(1, int(round(batch)))
    computed = 0
    for i in range(0, len(token_counts), size):
        lengths = np.asarray(token_counts[i : i + size])
        computed += runner.computed_tokens(lengths)
    real = sum(token_counts)
    return {"batch": size, "computed_tokens": computed, "real_tokens": real, "waste": round((computed - real) / real, 4)}


def served_counters(metrics_url: str, timeout_s: float = 5.0, models: list[str] | None = None) -> dict[str, float]:
    """The served steps' tritonize_* counters (serving/metrics.py), summed over steps (those of `models` only,
    where given: the other models of the repository are not measured); rejections per reason as
    "tritonize_inputs_rejected_total/<reason>"."""
    totals: dict[str, float] = {}
    for s in metrics_text.samples(metrics_text.fetch(metrics_url, timeout_s)):
        if not s.name.startswith("tritonize_") or models is not None and s.labels.get("model", "") not in models:
            continue
        reason = s.labels.get("reason")
        key = f"{s.name}/{reason}" if reason else s.name
        totals[key] = totals.get(key, 0.0) + s.value
    return totals


def settled(read: Callable[[], T], limit_s: float = 10 * PUBLISH_S) -> T:
    """What `read` returns once two reads 2 x PUBLISH_S apart agree: the served steps publish their counts within
    PUBLISH_S of making them (serving/metrics.py), so a read right after the last answer can miss the last ones.
    A server that other clients keep busy never settles: the last read once `limit_s` has passed."""
    deadline = time.monotonic() + limit_s
    last = read()
    while True:
        time.sleep(2 * PUBLISH_S)
        now = read()
        if now == last or time.monotonic() > deadline:
            return now
        last = now


GRAPH_BATCH = "graph_batch"  # texts per graph run of the fused step, in a measurement's served counters


class ServedCounters:
    """What the served steps counted during one measurement: deltas of their tritonize_* counters."""

    def __init__(self, metrics_url: str, models: list[str] | None = None):
        self.metrics_url = metrics_url
        self.models = models
        self.before: dict[str, float] = {}

    def read(self) -> dict[str, float]:
        return settled(lambda: served_counters(self.metrics_url, models=self.models))

    def start(self) -> None:
        self.before = self.read()

    def finish(self) -> dict:
        after = self.read()
        delta = {k: round(v - self.before.get(k, 0.0), 3) for k, v in after.items() if v - self.before.get(k, 0.0)}
        runs = delta.get("tritonize_graph_runs_total")
        if runs:  # the fused step runs the requests waiting at once: its graph's batch, not Triton's
            delta[GRAPH_BATCH] = round(delta.get("tritonize_graph_texts_total", 0.0) / runs, 2)
        tokens = delta.get("tritonize_tokens_total", 0.0)
        if tokens:
            delta["padding_waste"] = round(delta.get("tritonize_padded_tokens_total", tokens) / tokens - 1, 4)
            delta["unknown_token_rate"] = round(delta.get("tritonize_unknown_tokens_total", 0.0) / tokens, 6)
        return delta
