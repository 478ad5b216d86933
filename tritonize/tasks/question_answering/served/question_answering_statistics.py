"""What a question-answering model's answers are counted by: the best answer's score, and the questions it found
no span for.

Served: copied verbatim beside serving/statistics.py in each step that counts.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .statistics import Statistic, cells

SCORE = "tritonize_output_answer_score"


def answer_scores(arr: np.ndarray, context: Mapping) -> np.ndarray:
    return np.array([a["score"] for a in cells(arr) if a], dtype=np.float64)


def unanswered(arr: np.ndarray, context: Mapping) -> list[str]:
    return ["" for a in cells(arr) if not a]


STATISTICS = (
    Statistic(SCORE, "Question answering: the best answer's score, per question.",
              "Question answering: best answer's score", values=answer_scores),
    Statistic("tritonize_output_unanswerable_total", "Questions answered with no span (the empty answer).",
              "Question answering: unanswerable share", counts=unanswered, share_of=SCORE),
)
