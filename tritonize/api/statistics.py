"""What the models answer, counted where the answers are read, for models whose repository counts nothing itself.

A repository that tokenizes in its graphs (the default) runs no Python on its served path, so no step of it sees
an answer: its output statistics (serving/statistics.py's histograms and counters, with the baseline recorded at
generation) and its step counters (texts, tokens, truncated texts) are counted here, on the API's /metrics, under
the same series names and labels the Python steps publish on Triton's metrics port, so the dashboards, the drift
rules and the alerts read either. What this gives up: a client calling Triton itself (gRPC or the KServe HTTP
routes) is answered but not counted. A repository with a Python step keeps counting in Triton, and nothing is
counted here for it (it would be counted twice).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import numpy as np

from ..serving.batching import TOKEN_COUNT, TRUNCATED
from ..serving.statistics import OutputStatistics
from ..spec import FIRST, MODEL, repo_paths
from .catalog import ServedModel

log = logging.getLogger("tritonize.api")
# The step counters a Python tokenizer step publishes (serving/metrics.py), under its name: what reads them (the
# bench's counters, the dashboards) finds them the same for either layout.
USAGE = {"tritonize_texts_total": "Texts the step accepted (a pair counts once).",
         "tritonize_tokens_total": "Tokens the texts became, special tokens included, after truncation.",
         "tritonize_texts_truncated_total": "Texts longer than the max length, truncated (or split into windows)."}


class Families:
    """The API's gauges by name, each made once in its registry: a gauge of exactly the series' name (a counter
    would be renamed `_total`); with several workers, each worker's values are summed, a baseline taken once."""

    def __init__(self, registry):
        self.registry = registry
        self._families: dict[str, object] = {}

    def __call__(self, name: str, description: str, labels: tuple[str, ...], mode: str):
        from prometheus_client import Gauge

        if name not in self._families:
            self._families[name] = Gauge(name, description, labels, registry=self.registry, multiprocess_mode=mode)
        return self._families[name]


class Gauges:
    """serving/metrics.py's StepMetrics interface (`declare`, `set_gauge`, `add`, `warn`) on the API's gauges: one
    a model version, as each step has its own (its series' keys name no model)."""

    enabled = True

    def __init__(self, families: Families):
        self._family = families
        self._series: dict[tuple, object] = {}

    def declare(self, name: str, description: str, labels: dict[str, str], key: str | None = None,
                kind: str = "COUNTER") -> None:
        if (name, key) not in self._series:
            self._series[(name, key)] = self._family(name, description, tuple(labels), "sum").labels(**labels)

    def set_gauge(self, name: str, description: str, labels: dict[str, str], value: float) -> None:
        self._family(name, description, tuple(labels), "max").labels(**labels).set(float(value))

    def add(self, items: list) -> None:
        for key, value in items:
            self._series[key].inc(value)

    def warn(self, message: str) -> None:
        log.warning("tritonize metrics: %s", message)


class ApiStatistics:
    """The statistics of every served model that counts none itself, by (model, version): read from the model
    step's version folder on the first answer of that version."""

    def __init__(self, registry):
        self.families = Families(registry)
        self.usage = Gauges(self.families)
        self._of: dict[tuple[str, str], OutputStatistics | None] = {}

    @staticmethod
    def counts_here(model: ServedModel) -> bool:
        """Whether no step of the model's repository sees its answers (its tokenizer runs in graphs)."""
        return model.manifest.pipeline.graph_tokenizes

    def _statistics(self, model: ServedModel, version: str) -> OutputStatistics | None:
        key = (model.name, version)
        if key not in self._of:
            folder = repo_paths(model.repository, model.name)[MODEL.key] / version
            found = OutputStatistics.of_step(str(folder), Gauges(self.families))
            if found is not None:
                found.start(found.reads)
            self._of[key] = found
        return self._of[key]

    def observe(self, model: ServedModel, version: str, answer: Mapping[str, np.ndarray]) -> None:
        """Count one answer of `version` of the model (never failing the answer)."""
        if not self.counts_here(model):
            return
        try:
            statistics = self._statistics(model, version)
            if statistics is not None:
                statistics.observe(answer)
            self._usage(model, answer)
        except Exception as exc:  # noqa: BLE001 - a count must not cost a caller its answer
            log.warning("statistics of %s not counted: %s: %s", model.name, type(exc).__name__, exc)

    def _usage(self, model: ServedModel, answer: Mapping[str, np.ndarray]) -> None:
        tokens = answer.get(TOKEN_COUNT)
        if tokens is None:
            return
        step = repo_paths(model.repository, model.name)[FIRST.key].name
        truncated = answer.get(TRUNCATED)
        values = {"tritonize_texts_total": len(tokens), "tritonize_tokens_total": int(np.asarray(tokens).sum()),
                  "tritonize_texts_truncated_total": int(np.asarray(truncated).sum()) if truncated is not None else 0}
        for name in values:
            self.usage.declare(name, USAGE[name], {"model": step}, step)
        self.usage.add([((name, step), value) for name, value in values.items()])
