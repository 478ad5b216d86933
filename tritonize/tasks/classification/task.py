"""Sequence classification: TEXT in, `logits` and `probabilities` out.

`probabilities` is what transformers' text-classification pipeline applies for the folder's `problem_type`:
a softmax over the labels (single-label, the default), or a sigmoid per label (multi-label: toxicity,
emotions), computed in the graph. Labels come from the folder's id2label and are written to labels.txt next
to the configs that name them, so Triton's classification extension can answer "score:index:label" top-k
strings. Reference: the pipeline itself (`top_k=None`), on the probabilities users read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...spec import LABELS_FILE, ModelSpec, Options, TensorSpec
from ..task import (FLOAT, Calibrator, Detector, Ensemble, Exporter, Task, Verifier, load_pretrained,
                   refuse_foreign_flags)
from .contract import LOGITS, PROBABILITIES, CONTRACT, Activation, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

# config.json's problem_type -> what the text-classification pipeline applies to the logits. Any other value
# (regression, or one this table does not know) is refused: its scores would mean something else.
PROBLEM_TYPES: dict[str | None, Activation] = {
    None: "softmax",
    "single_label_classification": "softmax",
    "multi_label_classification": "sigmoid",
}


def _graph_class():
    import torch

    class ClassifierGraph(torch.nn.Module):
        """logits and their probabilities (the head's activation), so clients need no post-processing."""

        def __init__(self, model, activation: Activation):
            super().__init__()
            self.model = model
            self.activation = activation

        def forward(self, input_ids, attention_mask):
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
            if self.activation == "sigmoid":
                return logits, torch.sigmoid(logits)
            return logits, torch.softmax(logits, dim=-1)

    return ClassifierGraph


class ClassificationDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        return folder.head_class == "ForSequenceClassification" and folder.num_labels >= 2 and not folder.is_cross_encoder

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, (), "a classifier")
        id2label = folder.config.get("id2label") or {}
        if len(id2label) < 2:
            raise TritonizeError(
                "a classification model needs at least two labels (id2label in config.json)",
                hint="set id2label/label2id in config.json",
            )
        problem_type = folder.config.get("problem_type")
        if problem_type not in PROBLEM_TYPES:
            known = ", ".join(f"{k} ({v})" for k, v in PROBLEM_TYPES.items() if k)
            raise TritonizeError(f"config.json declares problem_type {problem_type!r}; tritonize serves {known}")
        return Head(labels=tuple(str(id2label[k]) for k in sorted(id2label, key=lambda k: int(k))),
                    activation=PROBLEM_TYPES[problem_type])

    def describe(self, head: Head) -> str:  # type: ignore[override]
        return f"{len(head.labels)} labels, " + ("a sigmoid per label (multi-label)" if head.activation == "sigmoid"
                                                  else "softmax over the labels")

    def labels(self, head: Head) -> tuple[str, ...]:  # type: ignore[override]
        return head.labels


class ClassificationEnsemble(Ensemble):
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        dims = (len(head.labels),)
        return (
            TensorSpec(LOGITS, FLOAT, dims, label_filename=LABELS_FILE),
            TensorSpec(PROBABILITIES, FLOAT, dims, label_filename=LABELS_FILE),
        )


class ClassificationExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        from transformers import AutoModelForSequenceClassification

        model = load_pretrained(AutoModelForSequenceClassification, spec, eager)
        return _graph_class()(model, spec.head.activation).eval()  # type: ignore[attr-defined]


class ClassificationVerifier(Verifier):
    same_argmax = True
    verified_output = 1  # probabilities: the activation is checked against the pipeline's, not only the logits

    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """The text-classification pipeline's scores for every label (`top_k=None`), in label order: it decides
        softmax or sigmoid from the folder by itself, so a wrong activation here cannot verify."""
        from transformers import pipeline

        pipe = pipeline("text-classification", model=spec.source, device="cpu",
                        trust_remote_code=spec.trust_remote_code)
        index = {label: i for i, label in enumerate(spec.head.labels)}  # type: ignore[attr-defined]
        scores = np.zeros((len(rows), len(index)), dtype=np.float32)
        answers = pipe([row[0] for row in rows], top_k=None, truncation=True, max_length=spec.max_length)
        for r, answer in enumerate(answers):
            for item in answer:
                scores[r, index[item["label"]]] = item["score"]
        return "transformers pipeline", scores


class ClassificationCalibrator(Calibrator):
    int8_figure = "argmax agreement"

    def int8_kept(self, fp32: np.ndarray, int8: np.ndarray) -> float:
        """The share of corpus texts given the same label."""
        return float((fp32.argmax(-1) == int8.argmax(-1)).mean())


class Classification(Task):
    contract = CONTRACT
    summary = "TEXT in, `logits` and `probabilities` (FP32 [N, labels]) out; top-k labels through Triton"
    serves = "*ForSequenceClassification folders with two or more labels"
    Detector = ClassificationDetector
    Ensemble = ClassificationEnsemble
    Exporter = ClassificationExporter
    Verifier = ClassificationVerifier
    Calibrator = ClassificationCalibrator


TASK = Classification()
