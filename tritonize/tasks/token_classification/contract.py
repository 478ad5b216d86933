"""Reading a token classifier's answers: `entities`, one JSON list per text, as the pipeline returns them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...spec import Head as BaseHead
from ..contract import TaskContract, json_cells

OUTPUT = "entities"


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "token-classification"
    labels: tuple[str, ...]  # index order
    aggregation: str


class TokenClassificationContract(TaskContract):
    head_type = Head
    output_names = (OUTPUT,)
    output_statistics = {"tritonize_output_entities_total": OUTPUT}
    statistics_module = "token_classification_statistics"

    def entities(self, outputs: dict[str, np.ndarray]) -> list[list[dict]]:
        """Per text, the spans the served step found."""
        return json_cells(outputs[OUTPUT])

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{OUTPUT: found} for found in self.entities(outputs)]

    def summary_line(self, row: dict) -> str:
        found = row[OUTPUT]
        return "  ".join(f"{e.get('entity_group', e.get('entity'))}:{e['word']!r} {e['score']:.3f}" for e in found) or "(none)"


CONTRACT = TokenClassificationContract()
