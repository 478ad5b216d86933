"""What a token classifier's answers are counted by: the entities it returned, by type.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .statistics import Statistic, cells


def entity_types(arr: np.ndarray, context: Mapping) -> list[str]:
    return [str(e.get("entity_group", e.get("entity", ""))) for found in cells(arr) for e in found]


STATISTICS = (
    Statistic("tritonize_output_entities_total", "Entities a token classifier returned, by type.",
              "Token classifier: entities per type", counts=entity_types, label="type"),
)
