"""What the per-task e2e tests share: a served model (`Served`), texts, pairs and queries per task, heads redrawn
so every case occurs, and each task's library reference to hold the served answers to."""


from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonize.client import TextClient
from tritonize.runtime.base import Endpoints

ATOL = 1e-4

QUERY = "what does the server do with raw strings?"
DOCUMENTS = [
    "Triton serves raw strings with dynamic batching.",
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé café — 日本語のテキスト 🚀",
    "a",
    " ".join(["A long document that is cut at the maximum length, never the query."] * 30),
]


@dataclass
class Served:
    folder: Path
    endpoints: Endpoints
    name: str
    repository: Path

    def client(self, protocol: str) -> TextClient:
        return TextClient(self.endpoints.grpc if protocol == "grpc" else self.endpoints.http, self.name, protocol=protocol)


def redraw_token_head(folder: Path, seed: int = 0) -> None:
    """A wider random draw of the token classifier, so plain words, entities and multi-token runs all occur."""
    import torch
    from transformers import AutoModelForTokenClassification

    model = AutoModelForTokenClassification.from_pretrained(str(folder))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.classifier.weight.normal_(0.0, 0.5, generator=generator)
        model.classifier.bias.copy_(torch.tensor([1.0, -1.0, 0.5, -1.0, 0.5]))
    model.eval().save_pretrained(str(folder))


def spread_qa_head(folder: Path, seed: int = 0) -> None:
    """A random model's span logits are nearly flat: spread them so the best span wins by a clear margin."""
    import torch
    from transformers import AutoModelForQuestionAnswering

    model = AutoModelForQuestionAnswering.from_pretrained(str(folder))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.qa_outputs.weight.copy_(torch.randn(model.qa_outputs.weight.shape, generator=generator))
        model.qa_outputs.bias.copy_(torch.randn(model.qa_outputs.bias.shape, generator=generator))
    model.eval().save_pretrained(str(folder))


def cross_encoder_scores(folder: Path, pairs: list[tuple[str, str]], logits: bool = False) -> np.ndarray:
    """CrossEncoder.predict as it scores by default, or (logits) with the identity as its activation."""
    import torch
    from sentence_transformers import CrossEncoder

    kwargs = {"activation_fn": torch.nn.Identity()} if logits else {}
    return np.asarray(CrossEncoder(str(folder), device="cpu").predict(pairs, convert_to_numpy=True, **kwargs),
                      dtype=np.float32)

EMBED_TEXTS = ["hello world", "Ünïcödé café — 日本語のテキスト 🚀", "a",
               " ".join(["The server keeps serving after bad input, and batching merges requests."] * 8)]


NER_TEXTS = [
    "Sarah lives in Berlin.",
    "Angela Merkel and Emmanuel Macron met in New York City.",
    "Zoë et François vivent à Montréal, Zürich et São Paulo.",
    "   the quick brown fox   ",
    " ".join(["Sarah Connor met Angela Merkel in Berlin and then flew to New York City."] * 8),  # truncated
]


def pipeline_entities(folder: Path, aggregation: str, texts: list[str]) -> list[list[dict]]:
    from transformers import pipeline

    pipe = pipeline("token-classification", model=str(folder), aggregation_strategy=aggregation, device="cpu")
    return [[{k: (v.item() if hasattr(v, "item") else v) for k, v in e.items()} for e in pipe(t)] for t in texts]


def assert_same_entities(got: list[list[dict]], expected: list[list[dict]]) -> None:
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert [{k: v for k, v in x.items() if k != "score"} for x in g] == [{k: v for k, v in x.items() if k != "score"} for x in e]
        assert all(abs(a["score"] - b["score"]) <= ATOL for a, b in zip(g, e))


QA_PAIRS = [
    ("Where does Sarah live?", "Sarah lives in Berlin and works in Paris."),
    ("Who visited Zürich?", "Zoë et François vivent à Montréal, Zürich et São Paulo."),
    ("Who operates room 37?", " ".join(f"The server in room {i} is run by Ada {i} and batches requests." for i in range(30))),
    ("what?", "   whitespace around the context   "),
]


def reference_answer(folder: Path, question: str, context: str) -> dict:
    """The question-answering pipeline, step for step (transformers 5 removed it; see test_serving_question_answering)."""
    from transformers import AutoTokenizer

    from support.question_answering import QAModel, reference_answers
    from tritonize.serving.question_answering import (
        default_doc_stride,
        default_max_seq_len,
    )

    max_seq_len = default_max_seq_len(AutoTokenizer.from_pretrained(str(folder)).model_max_length)
    answers = reference_answers(QAModel(folder), question, context, max_seq_len=max_seq_len,
                                doc_stride=default_doc_stride(max_seq_len))
    return answers[0]


def assert_same_answer(got: dict, expected: dict) -> None:
    assert (got["answer"], got["start"], got["end"]) == (expected["answer"], expected["start"], expected["end"])
    assert abs(got["score"] - expected["score"]) <= ATOL


def assert_same_answers(together: list[dict], alone: list[dict], expected: list[dict]) -> None:
    """QA_PAIRS answered in one request and one at a time, each as the pipeline answers it, its span in its context."""
    for got, want, (_, context) in zip(together, expected, QA_PAIRS):
        assert_same_answer(got, want)
        assert context[got["start"] : got["end"]] == got["answer"]
    for got, want in zip(alone, expected):
        assert_same_answer(got, want)
