"""What shout's answers are counted by: each answer's length. Served: copied beside serving/statistics.py."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .statistics import Statistic


def norm(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return np.linalg.norm(np.asarray(arr, dtype=np.float64), axis=1)


STATISTICS = (Statistic("tritonize_output_shout_norm", "The length of each text's answer.", "Shout: answer length",
                        values=norm),)
