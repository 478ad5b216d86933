"""What the served steps count of what the models answer: distributions per model and version, and their baseline.

Served: copied verbatim next to the steps that import it. Each histogram is a Prometheus histogram by its
conventions (`<name>_bucket{le}` cumulative, `<name>_sum`, `<name>_count`) and carries `model` (the name clients
call) and `version`; its bucket bounds were chosen at generation from the baseline sample, and
`<name>_baseline_ratio{le}` (a gauge) is the share of that sample at or below each bound, so a drift rule compares
the window's cumulative shares with the baseline's on the same series a heatmap draws.

The series are counters named as a histogram's are, not the Python backend's histogram kind: its `observe` is a
round trip to the server per value, where a counter's increments wait and go together (serving/metrics.py,
`PUBLISH_S`), one round trip per bucket that moved. `<name>_sum` is a gauge: a cosine or a logit can be
negative, and Triton refuses a counter's negative step (in Triton 2.51 that refusal, on a loaded machine, could
abort the whole server).

Which statistics a repository counts, what each reads and its bounds are in `STATISTICS_FILE` in the counting
step's version folder, written at generation (`baseline`); each step counts those whose tensor it holds, so a
statistic is counted once wherever the tensor is made: the tokenizer counts tokens, the step after the graph
(the fused step, a post step, or the statistics step of a production ensemble) what the graph answered.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .metrics import StepMetrics

TOKENS_PER_TEXT = "tritonize_tokens_per_text"
# name -> help text; each a histogram over the rows a step answered.
HISTOGRAMS = {
    TOKENS_PER_TEXT: "Tokens each text became, special tokens included, after truncation.",
    "tritonize_output_top_probability": "A classifier's probability of the label it predicted, per text.",
    "tritonize_output_score": "A reranker's score, per pair.",
    "tritonize_output_centroid_similarity": "Cosine between each embedding and the centroid of the baseline's.",
    "tritonize_output_answer_score": "Question answering: the best answer's score, per question.",
    "tritonize_output_active_terms": "A sparse encoder's terms of non-zero weight, per text.",
    "tritonize_output_vectors_per_text": "A late-interaction model's scored vectors, per text.",
}
# name -> (the label it counts by, or None, help text); each a counter.
COUNTERS = {
    "tritonize_output_label_total": ("label", "A classifier's answers, by the label it predicted."),
    "tritonize_output_entities_total": ("type", "Entities a token classifier returned, by type."),
    "tritonize_output_unanswerable_total": (None, "Questions answered with no span (the empty answer)."),
}
BASELINE_SUFFIX = "_baseline_ratio"  # the gauge beside each histogram: the baseline's cumulative share per bound
BASELINE_HELP = "The baseline sample's share at or below each bound of the histogram of the same name."
STATISTICS_FILE = "statistics.json"  # in the counting step's version folder: bounds and baseline per histogram
QUANTILES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # of the baseline: the histograms' bounds
INF = "+Inf"


def _cells(arr: np.ndarray) -> list:
    """BYTES cells holding one JSON document each, decoded in order."""
    return [json.loads(c.decode("utf-8") if isinstance(c, bytes) else str(c)) for c in np.asarray(arr).reshape(-1)]


def _flat(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return np.asarray(arr, dtype=np.float64).reshape(-1)


def _top_probability(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return np.asarray(arr, dtype=np.float64).max(axis=1)


def _centroid_similarity(arr: np.ndarray, context: Mapping) -> np.ndarray:
    vectors = np.asarray(arr, dtype=np.float64)
    centroid = np.asarray(context["centroid"], dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1)
    # einsum, not `vectors @ centroid`: a matrix product goes to OpenBLAS, whose threads (one per core) then spin in
    # sched_yield after every call, three quarters of the step's CPU (docs/benchmark.md, the host CPU).
    return np.einsum("ij,j->i", vectors, centroid) / np.where(norms > 0, norms, 1.0)


def _active_terms(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return (np.asarray(arr) >= 0).sum(axis=1).astype(np.float64)


def _answer_scores(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return np.array([a["score"] for a in _cells(arr) if a], dtype=np.float64)


# histogram -> what it makes of the tensor it reads: one value per row (a row with no value gives none).
VALUES: dict[str, Callable[[np.ndarray, Mapping], np.ndarray]] = {
    "tritonize_tokens_per_text": _flat,
    "tritonize_output_top_probability": _top_probability,
    "tritonize_output_score": _flat,
    "tritonize_output_centroid_similarity": _centroid_similarity,
    "tritonize_output_answer_score": _answer_scores,
    "tritonize_output_active_terms": _active_terms,
    "tritonize_output_vectors_per_text": _flat,
}


def _centroid(arr: np.ndarray) -> list[float]:
    """The direction of the baseline's embeddings: the mean of the unit vectors, unit length."""
    vectors = np.asarray(arr, dtype=np.float64)
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    mean = vectors.mean(axis=0)
    return [round(float(x), 7) for x in mean / max(float(np.linalg.norm(mean)), 1e-12)]


# histogram -> (the context key it needs, how the baseline's tensor makes it), recorded beside the bounds.
CONTEXTS = {"tritonize_output_centroid_similarity": ("centroid", _centroid)}


def _labels_predicted(arr: np.ndarray, context: Mapping) -> list[str]:
    labels = context["labels"]
    return [labels[i] if i < len(labels) else str(i) for i in np.asarray(arr).argmax(axis=1)]


def _entity_types(arr: np.ndarray, context: Mapping) -> list[str]:
    return [str(e.get("entity_group", e.get("entity", ""))) for found in _cells(arr) for e in found]


def _unanswered(arr: np.ndarray, context: Mapping) -> list[str]:
    return ["" for a in _cells(arr) if not a]


# counter -> what it counts in the tensor it reads: one label value per thing counted ("" where unlabelled).
COUNTS: dict[str, Callable[[np.ndarray, Mapping], list[str]]] = {
    "tritonize_output_label_total": _labels_predicted,
    "tritonize_output_entities_total": _entity_types,
    "tritonize_output_unanswerable_total": _unanswered,
}


def bucket_counts(values: np.ndarray, bounds: Sequence[float]) -> np.ndarray:
    """How many values lie at or below each bound, then in all (+Inf): a Prometheus histogram's cumulative buckets."""
    slots = np.searchsorted(np.asarray(bounds, dtype=np.float64), values, side="left")  # first bound >= value
    return np.cumsum(np.bincount(slots, minlength=len(bounds) + 1))


def bounds_of(values: np.ndarray) -> list[float]:
    """Bucket bounds from a baseline sample: its QUANTILES, each once (a discrete statistic has fewer)."""
    if not len(values):
        return []
    return sorted({float(round(q, 6)) for q in np.quantile(values, QUANTILES, method="nearest")})


def le_label(bound: float) -> str:
    return f"{bound:g}" if bound != float("inf") else INF


@dataclass(frozen=True)
class Histogram:
    """One histogram a repository counts: the tensor it reads, its bounds and the baseline's cumulative shares."""

    name: str
    reads: str
    bounds: tuple[float, ...]
    baseline: tuple[float, ...]  # the share of the baseline at or below each bound, then 1.0 (+Inf)

    @cached_property
    def les(self) -> list[str]:
        """Each bucket's `le` label, +Inf last (made once: every count the step publishes names them)."""
        return [le_label(b) for b in self.bounds] + [INF]

    def to_dict(self) -> dict:
        return {"reads": self.reads, "bounds": list(self.bounds), "baseline": list(self.baseline)}


def baseline(name: str, reads: str, values: np.ndarray) -> Histogram:
    """A histogram's bounds and baseline shares from the values its statistic took on the baseline sample."""
    values = np.asarray(values, dtype=np.float64)
    bounds = bounds_of(values)
    cumulative = bucket_counts(values, bounds) / max(1, len(values))
    return Histogram(name, reads, tuple(bounds), tuple(round(float(c), 6) for c in cumulative))


def values_of(name: str, arr: np.ndarray, context: Mapping) -> np.ndarray:
    """What histogram `name` observes in one tensor (the baseline and the served steps call this one function)."""
    return VALUES[name](arr, context)


class OutputStatistics:
    """The statistics one step counts: those of STATISTICS_FILE whose tensor the step holds (`observe`)."""

    def __init__(self, recorded: Mapping, version: str, metrics: StepMetrics):
        self.model, self.version, self.metrics = recorded["model"], str(version), metrics
        self.context = {"centroid": recorded.get("centroid"), "labels": recorded.get("labels", [])}
        self.histograms = [Histogram(n, h["reads"], tuple(h["bounds"]), tuple(h["baseline"]))
                           for n, h in recorded.get("histograms", {}).items() if n in VALUES]
        self.counters = {n: c["reads"] for n, c in recorded.get("counters", {}).items() if n in COUNTS}
        self.reads = frozenset([h.reads for h in self.histograms] + list(self.counters.values()))
        self._started: set[str] = set()

    @classmethod
    def of_step(cls, version_dir: str, metrics: StepMetrics) -> OutputStatistics | None:
        """The step's statistics from its version folder; None where the repository records none."""
        path = os.path.join(version_dir, STATISTICS_FILE)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f), os.path.basename(os.path.normpath(version_dir)), metrics)

    def labels(self, **more: str) -> dict[str, str]:
        return {"model": self.model, "version": self.version, **more}

    def start(self, names) -> None:
        """Declare the series of what a step holding tensors `names` counts, and publish the baselines once."""
        names = set(names) - self._started
        self._started |= names
        if not self.metrics.enabled:
            return
        for h in self.histograms:
            if h.reads in names:
                text = HISTOGRAMS[h.name]
                for le in h.les:
                    self.metrics.declare(h.name + "_bucket", text, self.labels(le=le), le)
                self.metrics.declare(h.name + "_count", text, self.labels())
                # A cosine or a logit can be negative, so the sum can fall: a gauge, stepped by `add` as the others.
                self.metrics.declare(h.name + "_sum", text, self.labels(), kind="GAUGE")
                for le, share in zip(h.les, h.baseline):
                    self.metrics.set_gauge(h.name + BASELINE_SUFFIX, BASELINE_HELP, self.labels(le=le), share)
        for name, reads in self.counters.items():
            label, text = COUNTERS[name]
            if reads in names and label == "label":
                for value in self.context["labels"]:
                    self.metrics.declare(name, text, self.labels(label=value), value)
            elif reads in names and label is None:
                self.metrics.declare(name, text, self.labels())

    def observe_requests(self, requests: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Count several requests' answers at once: the tensors statistics read, joined row-wise."""
        held = [n for n in self.reads if requests and n in requests[0]]
        if not held:
            return
        try:
            joined = {n: np.concatenate([np.asarray(r[n]) for r in requests]) for n in held}
        except ValueError:  # padded per request (a sparse encoder's terms): each request on its own
            for r in requests:
                self.observe({n: r[n] for n in held})
            return
        self.observe(joined)

    def observe(self, tensors: Mapping[str, np.ndarray]) -> None:
        """Count what the rows of `tensors` (the arrays of one or more requests, by name) answered; a count
        that fails is logged, and never fails the answers."""
        if not self.metrics.enabled:
            return
        try:
            self._observe(tensors)
        except Exception as exc:  # noqa: BLE001 - statistics must not cost a caller its answer
            self.metrics.warn(f"output statistics of {self.model} not counted: {type(exc).__name__}: {exc}")

    def _observe(self, tensors: Mapping[str, np.ndarray]) -> None:
        items: list = []
        for h in self.histograms:
            if h.reads in tensors:
                values = values_of(h.name, tensors[h.reads], self.context)
                if len(values):
                    items += [((h.name + "_bucket", le), int(c))
                              for le, c in zip(h.les, bucket_counts(values, h.bounds)) if c]
                    items += [((h.name + "_count", None), len(values)), ((h.name + "_sum", None), float(values.sum()))]
        for name, reads in self.counters.items():
            if reads in tensors:
                label, text = COUNTERS[name]
                for value, n in Counter(COUNTS[name](tensors[reads], self.context)).items():
                    key = value if label else None
                    self.metrics.declare(name, text, self.labels(**({label: value} if label else {})), key)
                    items.append(((name, key), n))
        self.metrics.add(items)

