"""What a reranker's answers are counted by: its score per pair.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from .statistics import Statistic, flat

STATISTICS = (
    Statistic("tritonize_output_score", "A reranker's score, per pair.", "Reranker: score per pair", values=flat),
)
