"""Reading extractive answers: QUESTION and CONTEXT in, `answer` (one JSON object per pair) out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ...spec import Head as BaseHead
from ...spec import TensorSpec
from ..contract import TaskContract, json_cells

QUESTION_INPUT, CONTEXT_INPUT = "QUESTION", "CONTEXT"
OUTPUT = "answer"


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "question-answering"
    question_first: bool  # the tokenizer pads right (the pipeline then puts the question first)
    cls_token_id: int | None  # kept answerable, as the pipeline does
    max_answer_len: int = 15


class QuestionAnsweringContract(TaskContract):
    head_type = Head
    output_names = (OUTPUT,)
    output_statistics = {"tritonize_output_answer_score": OUTPUT, "tritonize_output_unanswerable_total": OUTPUT}
    statistics_module = "question_answering_statistics"
    text_inputs = (TensorSpec(QUESTION_INPUT, "TYPE_STRING", (1,)), TensorSpec(CONTEXT_INPUT, "TYPE_STRING", (1,)))
    sample_first = "What does Triton serve?"
    reports_tokens = False  # the first step windows each context and answers alone

    def spans(self, outputs: dict[str, np.ndarray]) -> list[dict | None]:
        """Per (question, context), the best answer span, or None where the context holds none."""
        return json_cells(outputs[OUTPUT])

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{OUTPUT: answer} for answer in self.spans(outputs)]

    def summary_line(self, row: dict) -> str:
        a = row[OUTPUT]
        return "(no answer)" if not a else f"{a['answer']!r} {a['score']:.3f} [{a['start']}:{a['end']}]"


CONTRACT = QuestionAnsweringContract()
