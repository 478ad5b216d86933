"""Reranking: (QUERY, TEXT) pairs in, one relevance `score` per pair out.

The tokenizer step encodes each pair with the model's own pair template (with
token_type_ids where the model has segment embeddings) and cuts the document,
never the query. The graph is the folder's own sequence-classification model
with the activation sentence-transformers' CrossEncoder applies (sigmoid or
none, as the folder declares), and the reference is `CrossEncoder.predict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ..errors import TritonizeError
from ..spec import TEXT_INPUT, GenerateOptions, ModelSpec, TensorSpec
from ..spec import Head as BaseHead
from .base import FLOAT, Task, load_pretrained, pair_token_inputs, refuse_foreign_flags

if TYPE_CHECKING:
    from ..folder import ModelFolder

QUERY_INPUT = "QUERY"
OUTPUT = "score"
Activation = Literal["sigmoid", "identity"]
# The dotted paths sentence-transformers writes for a CrossEncoder's activation.
ACTIVATIONS: dict[str, Activation] = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
}
PAIRS = [
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("What is the capital of France?", "The quick brown fox jumps over the lazy dog."),
    ("how to deploy a transformer", "Triton serves raw strings with dynamic batching."),
    ("Ünïcödé café", "日本語のテキストも正しくトークン化されるべきです。"),
    ("short", "   leading and trailing whitespace   "),
    ("a query", " ".join(["This document is long and is cut at the maximum length, never the query."] * 40)),
    ("emoji 🚀", "Emoji and symbols 🚀✨ — “quotes”, ‘apostrophes’ and ∑ math ≤ ≥."),
    ("machine learning in production", " ".join(f"word{i}" for i in range(300))),
]


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "rerank"
    activation: Activation


def _activation_path(folder: ModelFolder) -> str | None:
    """Where each sentence-transformers release kept the activation, newest first."""
    for declared in (
        (folder.config.get("sentence_transformers") or {}).get("activation_fn"),
        folder.config.get("sbert_ce_default_activation_function"),
        folder.st_config.get("activation_fn"),
    ):
        if declared:
            return str(declared)
    return None


def _graph_class():
    import torch

    class ScoreGraph(torch.nn.Module):
        """The folder's sequence classifier; its one logit through the CrossEncoder's activation."""

        def __init__(self, model, activation: str):
            super().__init__()
            self.model, self.activation = model, activation

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits
            return torch.sigmoid(logits) if self.activation == "sigmoid" else logits

    return ScoreGraph


class Rerank(Task):
    name = "rerank"
    summary = "QUERY and TEXT in (one pair per row), `score` (FP32 [N, 1]) out"
    serves = "sentence-transformers CrossEncoder folders and one-label *ForSequenceClassification folders"
    head_type = Head
    output_names = (OUTPUT,)
    text_inputs = (TensorSpec(QUERY_INPUT, "TYPE_STRING", (1,)), TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,)))
    truncation = "only_second"  # the document is cut, never the query
    sample_first = "what does Triton serve?"

    def detect(self, folder: ModelFolder) -> bool:
        return folder.head_class == "ForSequenceClassification" and (folder.is_cross_encoder or folder.num_labels == 1)

    def read_head(self, folder: ModelFolder, options: GenerateOptions) -> Head:
        refuse_foreign_flags(options, (), "a reranker")
        if folder.num_labels != 1:
            raise TritonizeError(
                f"a reranker scores with one label; {folder.root} has {folder.num_labels}",
                hint="tritonize serves one-score CrossEncoders; a multi-label one is a classifier",
            )
        path = _activation_path(folder)
        if path is None:
            return Head("sigmoid")  # CrossEncoder's default for one label
        if path not in ACTIVATIONS:
            raise TritonizeError(f"unsupported CrossEncoder activation {path!r}", hint=f"supported: {', '.join(ACTIVATIONS)}")
        return Head(ACTIVATIONS[path])

    def token_inputs(self, folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
        return pair_token_inputs(folder, tokenizer_inputs)

    def verification_rows(self) -> list[tuple[str, ...]]:
        return list(PAIRS)

    def describe(self, head: Head) -> str:  # type: ignore[override]
        return f"pairs, {head.activation} score"

    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, FLOAT, (1,)),)

    def info_type(self, head: Head) -> dict:  # type: ignore[override]
        return {"reranker": {"id2label": {0: "LABEL_0"}, "label2id": {"LABEL_0": 0}}}

    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        from transformers import AutoModelForSequenceClassification

        model = load_pretrained(AutoModelForSequenceClassification, spec, eager)
        return _graph_class()(model, spec.head.activation).eval()  # type: ignore[attr-defined]

    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        from sentence_transformers import CrossEncoder

        model = CrossEncoder(spec.sentence_transformers_dir or spec.source, device="cpu", max_length=spec.max_length,
                             trust_remote_code=spec.trust_remote_code)
        scores = model.predict([tuple(r) for r in rows], batch_size=len(rows), convert_to_numpy=True)
        return "sentence-transformers CrossEncoder", np.asarray(scores, dtype=np.float32).reshape(len(rows), 1)

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{OUTPUT: float(v)} for v in np.asarray(outputs[OUTPUT]).reshape(-1)]

    def summary_line(self, row: dict) -> str:
        return f"score {row[OUTPUT]:.4f}"


TASK = Rerank()
