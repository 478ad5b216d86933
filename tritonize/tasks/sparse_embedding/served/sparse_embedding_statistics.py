"""What a sparse encoder's answers are counted by: its terms of non-zero weight per text.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .statistics import Statistic


def active_terms(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return (np.asarray(arr) >= 0).sum(axis=1).astype(np.float64)


STATISTICS = (
    Statistic("tritonize_output_active_terms", "A sparse encoder's terms of non-zero weight, per text.",
              "Sparse encoder: active terms per text", values=active_terms),
)
