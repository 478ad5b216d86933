"""What a late-interaction model's answers are counted by: its scored vectors per text.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from .statistics import Statistic, flat

STATISTICS = (
    Statistic("tritonize_output_vectors_per_text", "A late-interaction model's scored vectors, per text.",
              "Late interaction: vectors per text", values=flat),
)
