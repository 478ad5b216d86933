"""Helpers shared by several test modules."""


from __future__ import annotations

import urllib.request

from tritonize.bench.stats import settled


def scrape(url: str) -> dict[tuple[str, str], float]:
    """tritonize_* series from a Prometheus text page: (name, labels) -> value, once the steps have published
    what they counted (they publish within PUBLISH_S)."""
    return settled(lambda: page(url))


def page(url: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - loopback
        text = resp.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith("tritonize_"):
            series, value = line.rsplit(" ", 1)
            name, _, labels = series.partition("{")
            found[(name, labels.rstrip("}"))] = float(value)
    return found
