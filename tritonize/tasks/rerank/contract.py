"""Reading a reranker's answers: (QUERY, TEXT) pairs in, the model's `logit` per pair, and the one place its
activation is applied.

The graph returns the head's logit: a sigmoid inside the graph could not be undone exactly (in float32 it
saturates to 1 long before the logit is large), so the raw score would be lost. The CrossEncoder's activation is
`activate`, applied where a score is read: the API's ranking routes and the client's `rerank`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...errors import TritonizeError
from ...spec import TEXT_INPUT, TensorSpec
from ...spec import Head as BaseHead
from ..contract import TaskContract

QUERY_INPUT = "QUERY"
OUTPUT = "logit"  # the head's logit per pair, before the CrossEncoder's activation
ACTIVATION_PARAMETER = "activation"  # the ensemble's configuration names the activation, for clients over Triton
Activation = Literal["sigmoid", "identity"]
Layout = Literal["sequence-classification", "causal-lm"]
CAUSAL = "causal-lm"


def activate(logits: np.ndarray, activation: str) -> np.ndarray:
    """The CrossEncoder's activation on the model's logits, in float64: sigmoid (1 / (1 + e^-x) through logaddexp,
    which does not overflow for a large negative logit) or identity. Anything else is refused, never passed on."""
    values = np.asarray(logits, dtype=np.float64)
    if activation == "sigmoid":
        return np.exp(-np.logaddexp(0.0, -values))
    if activation == "identity":
        return values
    raise TritonizeError(f"unknown reranker activation {activation!r}", hint="a reranker applies sigmoid or identity")


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

    def activate(self, logits: np.ndarray) -> np.ndarray:
        """The scores `CrossEncoder.predict` returns by default, from the served logits."""
        return activate(logits, self.activation)

    @property
    def token_ids(self) -> tuple[int, ...]:
        return (self.true_token_id,) + ((self.false_token_id,) if self.false_token_id >= 0 else ())


class RerankContract(TaskContract):
    head_type = Head
    output_names = (OUTPUT,)
    output_statistics = {"tritonize_output_score": OUTPUT}
    statistics_module = "rerank_statistics"
    text_inputs = (TensorSpec(QUERY_INPUT, "TYPE_STRING", (1,)), TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,)))
    sample_first = "what does Triton serve?"

    def scores(self, outputs: dict[str, np.ndarray], head: Head, raw: bool = False) -> np.ndarray:
        """One relevance score per (query, text) pair, in float64 (what JSON carries): the head's activation of
        the served logit, or (raw) the logit itself."""
        logits = outputs[OUTPUT].reshape(-1)
        return logits.astype(np.float64) if raw else head.activate(logits)

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        """The ensemble's answer as it comes: the logit (the client's `rerank` applies the activation)."""
        return [{OUTPUT: float(v)} for v in np.asarray(outputs[OUTPUT]).reshape(-1)]

    def summary_line(self, row: dict) -> str:
        return f"logit {row[OUTPUT]:.4f}"


CONTRACT = RerankContract()
