"""Reading a reranker's answers: (QUERY, TEXT) pairs in, one relevance `score` per pair."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...spec import TEXT_INPUT, TensorSpec
from ...spec import Head as BaseHead
from ..contract import TaskContract

QUERY_INPUT = "QUERY"
OUTPUT = "score"
Activation = Literal["sigmoid", "identity"]
Layout = Literal["sequence-classification", "causal-lm"]
CAUSAL = "causal-lm"


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "rerank"
    activation: Activation
    layout: Layout = "sequence-classification"
    # causal-lm: LogitScore's tokens. The score is logit[true] - logit[false] at the last real token, or
    # logit[true] alone where the folder declares no false token (-1).
    true_token_id: int = -1
    false_token_id: int = -1
    template: tuple[str, ...] = ()  # (prefix, middle, suffix) around the query and the document
    suffix_ids: tuple[int, ...] = ()  # the template's closing tokens, restored at the end of a truncated row
    prompt: str = ""  # the folder's default prompt, which predict() renders into the template ("": none)
    template_tokens: int = 0  # tokens the template adds to every pair

    @property
    def token_ids(self) -> tuple[int, ...]:
        return (self.true_token_id,) + ((self.false_token_id,) if self.false_token_id >= 0 else ())


class RerankContract(TaskContract):
    head_type = Head
    output_names = (OUTPUT,)
    output_statistics = {"tritonize_output_score": OUTPUT}
    text_inputs = (TensorSpec(QUERY_INPUT, "TYPE_STRING", (1,)), TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,)))
    sample_first = "what does Triton serve?"

    def scores(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        """One relevance score per (query, text) pair, in float64 (what JSON carries)."""
        return outputs[OUTPUT].reshape(-1).astype(np.float64)

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{OUTPUT: float(v)} for v in np.asarray(outputs[OUTPUT]).reshape(-1)]

    def summary_line(self, row: dict) -> str:
        return f"score {row[OUTPUT]:.4f}"


CONTRACT = RerankContract()
