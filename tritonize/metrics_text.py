"""The one reader of Prometheus's text format (Triton's metrics port, the API's /metrics), for the product and the
tests: prometheus_client's own parser, so a label value with a comma, a brace or an escaped quote reads as
Prometheus reads it, which splitting lines by hand gets wrong.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

# The parser renames a counter's samples to end in `_total` (OpenMetrics' form) where the page wrote them without
# (Triton's nv_* counters, the served steps' histogram buckets): the names declared so are given back.
_COUNTER = re.compile(r"^#\s*TYPE\s+(\S+)\s+counter\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Sample:
    """One series' value, under the name the page wrote."""

    name: str
    labels: dict[str, str]
    value: float

    @property
    def key(self) -> tuple[str, tuple[tuple[str, str], ...]]:
        """(name, its labels sorted): what tells two series apart."""
        return self.name, tuple(sorted(self.labels.items()))

    def has(self, **labels: str) -> bool:
        """Whether the series carries each of `labels` with that value."""
        return all(self.labels.get(k) == v for k, v in labels.items())


def samples(text: str) -> list[Sample]:
    """Every sample of a page, in its order."""
    bare_counters = set(_COUNTER.findall(text))
    found = []
    for family in text_string_to_metric_families(text):
        renamed = family.type == "counter" and family.name in bare_counters
        for s in family.samples:
            name = s.name.removesuffix("_total") if renamed else s.name
            found.append(Sample(name, dict(s.labels), float(s.value)))
    return found


def kinds(text: str) -> dict[str, str]:
    """Each family's declared type, by the name its TYPE line wrote ("counter", "gauge", ...)."""
    bare_counters = set(_COUNTER.findall(text))
    return {(family.name if family.type != "counter" or family.name in bare_counters else family.name + "_total"):
            family.type for family in text_string_to_metric_families(text)}


def select(found: Iterable[Sample], name: str, **labels: str) -> list[Sample]:
    """The series named `name` that carry `labels` (and any others)."""
    return [s for s in found if s.name == name and s.has(**labels)]


def total(found: Iterable[Sample], name: str, **labels: str) -> float:
    """The sum over the series named `name` that carry `labels`; 0 where there is none."""
    return sum(s.value for s in select(found, name, **labels))


def value(found: Iterable[Sample], name: str, **labels: str) -> float:
    """The value of the one series named `name` with exactly `labels`; an error naming it where there is none."""
    for s in found:
        if s.name == name and s.labels == labels:
            return s.value
    shown = ",".join(f'{k}="{v}"' for k, v in labels.items())
    raise LookupError(f"no series {name}{{{shown}}} on the page")


def fetch(url: str, timeout_s: float = 5.0) -> str:
    """A metrics page's text (`url` as host:port, with or without a scheme and /metrics)."""
    url = url if url.startswith(("http://", "https://")) else f"http://{url}"
    if not url.rstrip("/").endswith("/metrics"):
        url = url.rstrip("/") + "/metrics"
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - a server's own metrics port
        return resp.read().decode(errors="replace")
