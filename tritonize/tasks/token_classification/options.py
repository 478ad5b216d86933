"""The `tritonize generate` option only a token classifier reads: data, gathered by the registry without importing
what builds."""

from __future__ import annotations

from ...spec import TaskOption

AGGREGATIONS = ("none", "simple", "first", "average", "max")

OPTIONS: tuple[TaskOption, ...] = (
    TaskOption("aggregation", "str | None", "token classification: how tokens group into entities "
                              "(default: simple)", choices=AGGREGATIONS, after="baseline"),
)
