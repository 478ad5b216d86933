"""What the served steps should count of a request's answers, and what Triton's metrics page says they counted.

The expectation runs the repository's own steps in this process (chain.py) and the statistics' functions (the
task's statistics module, as serving/statistics.py reads it) on their outputs, with the bounds generation recorded: the page must show exactly that.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

from tritonize import chain, metrics_text, tasks
from tritonize.bench.server_counters import settled
from tritonize.manifest import read_manifest
from tritonize.serving.metrics import PUBLISH_S, STATISTICS_PUBLISH_S
from tritonize.serving.statistics import INF, STATISTICS_FILE, bucket_counts, declared, le_label
from tritonize.spec import repo_paths

Key = tuple[str, tuple[tuple[str, str], ...]]  # metric name, its labels but model and version


def recorded(repository: Path, name: str) -> dict:
    """The statistics generation recorded for the served version of `name`."""
    version = read_manifest(repository, name).version
    return json.loads((repo_paths(repository, name)["model"] / str(version) / STATISTICS_FILE).read_text())


def _answered(repository: Path, name: str, inputs: dict[str, list[str]]) -> tuple[dict, dict, dict]:
    """(the recorded statistics, the outputs of one request of `inputs` run in this process, their context)."""
    record = recorded(repository, name)
    outputs = chain.in_process(repository, name=name)(list(zip(*inputs.values()))).outputs
    return record, outputs, {"centroid": record.get("centroid"), "labels": record.get("labels", [])}


def expected(repository: Path, name: str, inputs: dict[str, list[str]]) -> Counter:
    """What one request of `inputs` adds to each statistic's series."""
    record, outputs, context = _answered(repository, name, inputs)
    known = declared(record["modules"])
    added: Counter = Counter()
    for metric, h in record["histograms"].items():
        values = known[metric].values(outputs[h["reads"]], context)
        for le, n in zip([le_label(b) for b in h["bounds"]] + [INF], bucket_counts(values, h["bounds"])):
            added[(f"{metric}_bucket", (("le", le),))] += int(n)
        added[(f"{metric}_count", ())] += len(values)
    for metric, c in record["counters"].items():
        label = known[metric].label
        for value in known[metric].counts(outputs[c["reads"]], context):
            added[(metric, ((label, value),) if label else ())] += 1
    return +added  # counts only: a series that moved


Page = tuple[list[metrics_text.Sample], dict[str, str]]  # the statistics' samples, their families' types
PREFIXES = ("tritonize_output_", "tritonize_tokens_per")


def _page(metrics_url: str) -> Page:
    """The statistics' series of Triton's metrics page, and their types (the step's other counters and Triton's
    move by themselves)."""
    text = metrics_text.fetch(metrics_url)
    return ([s for s in metrics_text.samples(text) if s.name.startswith(PREFIXES)],
            {name: kind for name, kind in metrics_text.kinds(text).items() if name.startswith(PREFIXES)})


def _series(page: Page, model: str) -> dict[Key, float]:
    """The statistics' series of `model` (sums left out: floats summed in another order)."""
    names = set(tasks.statistics())
    found = {}
    for s in page[0]:
        pairs = dict(s.labels)
        base = s.name.removesuffix("_bucket").removesuffix("_count")
        if base in names and s.name != f"{base}_sum" and pairs.pop("model", None) == model:
            pairs.pop("version", None)
            found[(s.name, tuple(sorted(pairs.items())))] = s.value
    return found


def _settled_page(metrics_url: str) -> Page:
    """The statistics' series once the steps have published what they counted (within STATISTICS_PUBLISH_S)."""
    time.sleep(STATISTICS_PUBLISH_S + PUBLISH_S)
    return settled(lambda: _page(metrics_url), limit_s=2 * STATISTICS_PUBLISH_S)


def settled_pages(metrics_url: str, models: list[str]) -> dict[str, dict[Key, float]]:
    """Each model's series, read from one settled page."""
    page = _settled_page(metrics_url)
    return {model: _series(page, model) for model in models}


def counted(before: dict[Key, float], after: dict[Key, float]) -> Counter:
    """What moved between two readings of the page."""
    return +Counter({k: round(v - before.get(k, 0.0)) for k, v in after.items()})


def expected_sum(repository: Path, name: str, metric: str, inputs: dict[str, list[str]]) -> float:
    """What one request of `inputs` adds to `<metric>_sum`."""
    record, outputs, context = _answered(repository, name, inputs)
    values = declared(record["modules"])[metric].values
    return float(values(outputs[record["histograms"][metric]["reads"]], context).sum())


def sum_series(metrics_url: str, model: str, metric: str) -> tuple[str, float]:
    """(its TYPE, its value) of `<metric>_sum` of `model`, from a settled page."""
    found, kinds = _settled_page(metrics_url)
    sums = metrics_text.select(found, f"{metric}_sum", model=model)
    return kinds.get(f"{metric}_sum", ""), (sums[0].value if sums else 0.0)

