"""Reading a classifier's answers: `logits` and `probabilities` per text, and Triton's top-k label strings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...spec import Head as BaseHead
from ..contract import TaskContract

LOGITS, PROBABILITIES = "logits", "probabilities"
Activation = Literal["softmax", "sigmoid"]


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "classification"
    labels: tuple[str, ...]  # index order
    activation: Activation = "softmax"  # repositories written before multi-label support were all softmax


@dataclass(frozen=True)
class Label:
    """One class of a top-k answer, from Triton's classification extension."""

    label: str
    score: float
    index: int


def parse_classes(arr: np.ndarray) -> list[list[Label]]:
    """Decode classification strings "score:index[:label]" into Labels, one list per text."""
    rows = arr.reshape(arr.shape[0], -1) if arr.ndim > 1 else arr.reshape(-1, 1)
    parsed: list[list[Label]] = []
    for row in rows:
        labels = []
        for cell in row:
            text = cell.decode("utf-8") if isinstance(cell, bytes) else str(cell)
            score, index, *rest = text.split(":", 2)
            labels.append(Label(rest[0] if rest else index, float(score), int(index)))
        parsed.append(labels)
    return parsed


class ClassificationContract(TaskContract):
    head_type = Head
    output_names = (LOGITS, PROBABILITIES)
    output_statistics = {"tritonize_output_top_probability": PROBABILITIES,
                         "tritonize_output_label_total": PROBABILITIES}
    statistics_module = "classification_statistics"

    def scores(self, outputs: dict[str, np.ndarray], raw: bool = False) -> np.ndarray:
        """Per text, a score per label in label order: the head's probabilities, or its logits (raw)."""
        return outputs[LOGITS if raw else PROBABILITIES].astype(np.float64)

    def client_request(self, top_k: int) -> tuple[list[str] | None, int]:
        return [PROBABILITIES], max(1, top_k)

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [
            {"labels": [{"label": lb.label, "score": lb.score, "index": lb.index} for lb in labels]}
            for labels in parse_classes(outputs[PROBABILITIES])
        ]

    def summary_line(self, row: dict) -> str:
        return "  ".join(f"{lb['label']} {lb['score']:.3f}" for lb in row["labels"])


CONTRACT = ClassificationContract()
