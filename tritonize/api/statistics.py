"""What the models answer, counted where the answers are read, for models whose repository counts nothing itself.

A repository that tokenizes in its graphs (the default) runs no Python on its served path, so no step of it sees
an answer: its output statistics (its task's histograms and counters, with the baseline recorded at
generation) and its step counters (texts, tokens, truncated texts) are counted here, on the API's /metrics, under
the same series names and labels the Python steps publish on Triton's metrics port, so the dashboards, the drift
rules and the alerts read either. What this gives up: a client calling Triton itself (gRPC or the KServe HTTP
routes) is answered but not counted. A repository with a Python step keeps counting in Triton, and nothing is
counted here for it (it would be counted twice).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import numpy as np

from ..serving.batching import TOKEN_COUNT, TRUNCATED
from ..serving.statistics import OutputStatistics
from ..spec import FIRST, MODEL, repo_paths
from .catalog import ServedModel

log = logging.getLogger("tritonize.api")
FLUSH_S = 0.05  # the longest an answer waits to be counted
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
    step's version folder on the first answer of that version.

    Answers are counted in batches: numpy's and prometheus_client's cost per call, paid on every single-text answer,
    was a third of the API's CPU. An answer waits at most FLUSH_S (or until /metrics is read, or the API stops),
    then every answer waiting for that version is counted as one."""

    def __init__(self, registry, flush_s: float = FLUSH_S):
        self.families = Families(registry)
        self.usage = Gauges(self.families)
        self.flush_s = flush_s
        self._of: dict[tuple[str, str], OutputStatistics | None] = {}
        self._steps: dict[str, str] = {}  # model -> its first step's name (the usage counters' label)
        self._pending: dict[tuple[str, str], tuple[ServedModel, list[Mapping[str, np.ndarray]]]] = {}
        self._timer: asyncio.TimerHandle | None = None

    @staticmethod
    def counts_here(model: ServedModel) -> bool:
        """Whether no step of the model's repository sees its answers (its tokenizer runs in graphs)."""
        return model.tokenizes_in_graph

    def _statistics(self, model: ServedModel, version: str) -> OutputStatistics | None:
        key = (model.name, version)
        if key not in self._of:
            folder = repo_paths(model.repository, model.name)[MODEL.key] / version
            declared_by = model.contract.statistics_module  # where a record written before named none
            found = OutputStatistics.of_step(str(folder), Gauges(self.families), (declared_by,) if declared_by else ())
            if found is not None:
                found.start(found.reads)
            self._of[key] = found
        return self._of[key]

    def declare(self, model: ServedModel) -> None:
        """The served version's series published at zero before any answer: Prometheus's `increase` counts from a
        series' first sample, so answers counted before it would be lost to the drift rule's window."""
        if not self.counts_here(model):
            return
        try:
            self._statistics(model, str(model.manifest.version))
        except Exception as exc:  # noqa: BLE001 - a count must not stop the API starting
            log.warning("statistics of %s not declared: %s: %s", model.name, type(exc).__name__, exc)

    def observe(self, model: ServedModel, version: str, answer: Mapping[str, np.ndarray]) -> None:
        """Count one answer of `version` of the model, soon (never failing the answer)."""
        if not self.counts_here(model):
            return
        key = (model.name, version)
        if key not in self._pending:
            self._pending[key] = (model, [])
        self._pending[key][1].append(answer)
        if self._timer is None:
            try:
                self._timer = asyncio.get_running_loop().call_later(self.flush_s, self.flush)
            except RuntimeError:  # no event loop: count now
                self.flush()

    def flush(self) -> None:
        """Count every answer waiting, one batch a model version."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, self._pending = self._pending, {}
        for (_, version), (model, answers) in pending.items():
            try:
                statistics = self._statistics(model, version)
                if statistics is not None:
                    statistics.observe_requests(answers)
                self._usage(model, answers)
            except Exception as exc:  # noqa: BLE001 - a count must not cost a caller its answer
                log.warning("statistics of %s not counted: %s: %s", model.name, type(exc).__name__, exc)

    def _step(self, model: ServedModel) -> str:
        """The model's first step's name, its usage counters declared with it."""
        step = self._steps.get(model.name)
        if step is None:
            step = self._steps[model.name] = repo_paths(model.repository, model.name)[FIRST.key].name
            for name, description in USAGE.items():
                self.usage.declare(name, description, {"model": step}, step)
        return step

    def _usage(self, model: ServedModel, answers: list[Mapping[str, np.ndarray]]) -> None:
        counted = [a for a in answers if a.get(TOKEN_COUNT) is not None]
        if not counted:
            return
        step = self._step(model)
        tokens = np.concatenate([np.asarray(a[TOKEN_COUNT]).reshape(-1) for a in counted])
        truncated = [np.asarray(a[TRUNCATED]).reshape(-1) for a in counted if a.get(TRUNCATED) is not None]
        values = {"tritonize_texts_total": len(tokens),
                  "tritonize_tokens_total": int(tokens.sum()),
                  "tritonize_texts_truncated_total": int(np.concatenate(truncated).sum()) if truncated else 0}
        self.usage.add([((name, step), value) for name, value in values.items()])
