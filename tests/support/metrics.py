"""A live server's metrics page as the shared reader reads it (tritonize/metrics_text.py), once the served steps
have published what they counted."""


from __future__ import annotations

from tritonize import metrics_text
from tritonize.bench.server_counters import settled


def scrape(url: str) -> list[metrics_text.Sample]:
    """The tritonize_* series of a metrics page, once the steps have published what they counted (they publish
    within PUBLISH_S)."""
    return settled(lambda: page(url))


def page(url: str) -> list[metrics_text.Sample]:
    return [s for s in metrics_text.samples(metrics_text.fetch(url)) if s.name.startswith("tritonize_")]
