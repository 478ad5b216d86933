"""What an embedder's answers are counted by: each vector's cosine to the centroid of the baseline's.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .statistics import Statistic


def centroid_similarity(arr: np.ndarray, context: Mapping) -> np.ndarray:
    vectors = np.asarray(arr, dtype=np.float64)
    centroid = np.asarray(context["centroid"], dtype=np.float64)
    # einsum, not `vectors @ centroid`: a matrix product goes to OpenBLAS, whose threads (one per core) then spin in
    # sched_yield after every call, three quarters of the step's CPU (docs/benchmark.md, the host CPU). Nor
    # np.linalg.norm: its passes over a thousand rows cost 4.6x einsum's one (1.8 against 0.39 µs a row).
    norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
    return np.einsum("ij,j->i", vectors, centroid) / np.where(norms > 0, norms, 1.0)


def centroid(arr: np.ndarray) -> list[float]:
    """The direction of the baseline's embeddings: the mean of the unit vectors, unit length."""
    vectors = np.asarray(arr, dtype=np.float64)
    vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    mean = vectors.mean(axis=0)
    return [round(float(x), 7) for x in mean / max(float(np.linalg.norm(mean)), 1e-12)]


STATISTICS = (
    Statistic("tritonize_output_centroid_similarity", "Cosine between each embedding and the centroid of the "
              "baseline's.", "Embedder: cosine to the baseline's centroid", values=centroid_similarity,
              context=("centroid", centroid)),
)
