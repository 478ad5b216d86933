"""What a classifier's answers are counted by: the probability of the label it predicted, and its answers by label.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .statistics import Statistic


def top_probability(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return np.asarray(arr, dtype=np.float64).max(axis=1)


def labels_predicted(arr: np.ndarray, context: Mapping) -> list[str]:
    labels = context["labels"]
    return [labels[i] if i < len(labels) else str(i) for i in np.asarray(arr).argmax(axis=1)]


STATISTICS = (
    Statistic("tritonize_output_top_probability", "A classifier's probability of the label it predicted, per text.",
              "Classifier: probability of the predicted label", values=top_probability),
    Statistic("tritonize_output_label_total", "A classifier's answers, by the label it predicted.",
              "Classifier: answers per label", counts=labels_predicted, label="label"),
)
