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

Which statistics a repository counts, what each reads, its bounds and the served modules that declare them
(each task's own `STATISTICS`, copied beside this module) are in `STATISTICS_FILE` in the counting step's version
folder, written at generation (`baseline`); each step counts those whose tensor it holds, so a statistic is
counted once wherever the tensor is made: the tokenizer counts tokens (`TOKENS`, declared here), the step after
the graph (the fused step, a post step, or the statistics step of a production ensemble) what the graph answered.
"""

from __future__ import annotations

import importlib
import json
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .metrics import StepMetrics

TOKENS_PER_TEXT = "tritonize_tokens_per_text"
BASELINE_SUFFIX = "_baseline_ratio"  # the gauge beside each histogram: the baseline's cumulative share per bound
BASELINE_HELP = "The baseline sample's share at or below each bound of the histogram of the same name."
STATISTICS_FILE = "statistics.json"  # in the counting step's version folder: bounds and baseline per histogram
QUANTILES = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)  # of the baseline: the histograms' bounds
INF = "+Inf"

Values = Callable[[np.ndarray, Mapping], np.ndarray]  # a tensor (and the context) -> one value per row
Counts = Callable[[np.ndarray, Mapping], list]  # a tensor (and the context) -> one label value per thing counted


@dataclass(frozen=True)
class Statistic:
    """One statistic counted of what a model answers: a histogram of `values`, or a counter of `counts` by `label`
    (None: unlabelled). Each task declares its own in a served module of its package (`STATISTICS`), named by its
    contract's `statistics_module`; the dashboard and the drift rules are written from them."""

    name: str
    help: str
    title: str  # the dashboard panel's
    values: Values | None = None
    counts: Counts | None = None
    label: str | None = None
    # (the context key it needs, how the baseline's tensor makes it), recorded beside the bounds
    context: tuple[str, Callable[[np.ndarray], list]] | None = None
    # A counter of what a histogram leaves out (a question with no answer has no score): the dashboard shows it as
    # a share of that histogram's count and its own.
    share_of: str | None = None

    @property
    def histogram(self) -> bool:
        return self.values is not None


def cells(arr: np.ndarray) -> list:
    """BYTES cells holding one JSON document each, decoded in order."""
    return [json.loads(c.decode("utf-8") if isinstance(c, bytes) else str(c)) for c in np.asarray(arr).reshape(-1)]


def flat(arr: np.ndarray, context: Mapping) -> np.ndarray:
    """One value per row, as the tensor holds it."""
    return np.asarray(arr, dtype=np.float64).reshape(-1)


TOKENS = Statistic(TOKENS_PER_TEXT, "Tokens each text became, special tokens included, after truncation.",
                   "Tokens per text", values=flat)


def declared(modules: Sequence[str]) -> dict[str, Statistic]:
    """Every statistic the served modules `modules` declare (their STATISTICS), and the tokens per text, by name.
    They are imported beside this module: in a version folder, where generation copies them, as in the package."""
    found = {TOKENS.name: TOKENS}
    for module in modules:
        for statistic in importlib.import_module(f"{__package__}.{module}").STATISTICS:
            found[statistic.name] = statistic
    return found


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


class OutputStatistics:
    """The statistics one step counts: those of STATISTICS_FILE whose tensor the step holds (`observe`)."""

    def __init__(self, recorded: Mapping, version: str, metrics: StepMetrics, modules: Sequence[str] = ()):
        """`modules`: the statistics' served modules where the record names none (written before it did)."""
        self.model, self.version, self.metrics = recorded["model"], str(version), metrics
        self.context = {"centroid": recorded.get("centroid"), "labels": recorded.get("labels", [])}
        self.known = declared(recorded.get("modules") or modules)
        self.histograms = [Histogram(n, h["reads"], tuple(h["bounds"]), tuple(h["baseline"]))
                           for n, h in recorded.get("histograms", {}).items() if n in self.known]
        self.counters = {n: c["reads"] for n, c in recorded.get("counters", {}).items() if n in self.known}
        self.reads = frozenset([h.reads for h in self.histograms] + list(self.counters.values()))
        self._started: set[str] = set()

    @classmethod
    def of_step(cls, version_dir: str, metrics: StepMetrics, modules: Sequence[str] = ()) -> OutputStatistics | None:
        """The step's statistics from its version folder; None where the repository records none."""
        path = os.path.join(version_dir, STATISTICS_FILE)
        if not os.path.isfile(path):
            return None
        with open(path, encoding="utf-8") as f:
            return cls(json.load(f), os.path.basename(os.path.normpath(version_dir)), metrics, modules)

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
                text = self.known[h.name].help
                for le in h.les:
                    self.metrics.declare(h.name + "_bucket", text, self.labels(le=le), le)
                self.metrics.declare(h.name + "_count", text, self.labels())
                # A cosine or a logit can be negative, so the sum can fall: a gauge, stepped by `add` as the others.
                self.metrics.declare(h.name + "_sum", text, self.labels(), kind="GAUGE")
                for le, share in zip(h.les, h.baseline):
                    self.metrics.set_gauge(h.name + BASELINE_SUFFIX, BASELINE_HELP, self.labels(le=le), share)
        for name, reads in self.counters.items():
            label, text = self.known[name].label, self.known[name].help
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
                values = self.known[h.name].values(tensors[h.reads], self.context)
                if len(values):
                    items += [((h.name + "_bucket", le), int(c))
                              for le, c in zip(h.les, bucket_counts(values, h.bounds)) if c]
                    items += [((h.name + "_count", None), len(values)), ((h.name + "_sum", None), float(values.sum()))]
        for name, reads in self.counters.items():
            if reads in tensors:
                label, text = self.known[name].label, self.known[name].help
                for value, n in Counter(self.known[name].counts(tensors[reads], self.context)).items():
                    key = value if label else None
                    self.metrics.declare(name, text, self.labels(**({label: value} if label else {})), key)
                    items.append(((name, key), n))
        self.metrics.add(items)

