"""A task's contract: what reading its answers takes (the tensors a request sends and gets back, and how they
decode).

Each task package's contract.py holds its side of this (vLLM's name, in its pooling entrypoints, for a task's typed
requests and answers): the head it describes, the ensemble's input and output names, and how a client turns the
returned arrays into one answer per text. Clients, the API and the benchmark's readers import these modules alone;
building and verifying a repository is task.py's.
"""

from __future__ import annotations

import abc
import json
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ..serving.batching import ROW_FIELDS, TOKEN_COUNT
from ..serving.statistics import TOKENS_PER_TEXT
from ..spec import TEXT_INPUT, Head, TensorSpec

SAMPLE_TEXT = "Triton serves raw strings."


class TaskContract(abc.ABC):
    head_type: ClassVar[type[Head]]
    output_names: ClassVar[tuple[str, ...]]  # what the ensemble returns (clients recognise a task by them)
    text_inputs: ClassVar[tuple[TensorSpec, ...]] = (TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,)),)
    # For a pair task, what curl examples send as the first text (a query, a question).
    sample_first: ClassVar[str] = ""
    # Whether the ensemble also returns each row's tokens: where its first step tokenizes, and so knows them.
    reports_tokens: ClassVar[bool] = True
    # What the served steps count of the answers: statistic -> the tensor it reads. Each statistic (its help, its
    # dashboard title, what it makes of the tensor) is declared in `statistics_module`, a served module of the
    # task's package (served/<module>.py: `STATISTICS`), which generation copies beside serving/statistics.py.
    output_statistics: ClassVar[dict[str, str]] = {}
    statistics_module: ClassVar[str | None] = None
    # How a new version is rolled out beside the served one (tritonize/rollout_state.py): "canary" where callers may get
    # either version's answers, "shadow" where two versions' answers live in two spaces (vectors), so the new one
    # is only compared in the background; None where neither is served.
    rollout: ClassVar[str | None] = "canary"
    # The ensemble's input that takes encoded image files (PNG, JPEG, WebP), where its model embeds images; None
    # where it reads texts alone.
    image_input: ClassVar[str | None] = None
    # Whether `tritonize bench` measures its models through the API's /v1/embeddings and against the peers that
    # answer that route's way (Infinity): one vector a text, as the embedding task answers.
    bench_as_embeddings: ClassVar[bool] = False

    @property
    def statistics(self) -> dict[str, str]:
        """Every statistic the served steps count: each text's tokens (where the first step tokenizes), then the
        task's own."""
        return ({TOKENS_PER_TEXT: TOKEN_COUNT} if self.reports_tokens else {}) | self.output_statistics

    @property
    def name(self) -> str:
        return self.head_type.task

    def head_from_dict(self, data: dict) -> Head:
        """The head back from a repository manifest (YAML lists back to tuples, nested ones too): the read side's,
        so that reading a manifest loads no build code."""

        def frozen(v: Any) -> Any:
            return tuple(frozen(x) for x in v) if isinstance(v, (list, tuple)) else v

        return self.head_type(**{k: frozen(v) for k, v in data.items()})

    @property
    def ensemble_output_names(self) -> tuple[str, ...]:
        """What the ensemble returns: the answer, then (where the first step tokenizes) each row's tokens."""
        return self.output_names + (ROW_FIELDS if self.reports_tokens else ())

    def request(self, rows: Sequence[tuple[str, ...]]) -> dict[str, list[str]]:
        """The ensemble's inputs for these rows (one text per text input each): a column per input."""
        return {spec.name: [row[i] for row in rows] for i, spec in enumerate(self.text_inputs)}

    def image_request(self, images: Sequence[bytes]) -> dict[str, list[bytes]]:
        """The ensemble's inputs for one request of images (encoded files' bytes); refused where it takes none."""
        if self.image_input is None:
            raise ValueError(f"a {self.name} model takes no images")
        return {self.image_input: list(images)}

    def row_for(self, text: str) -> tuple[str, ...]:
        """A request row around one text: a pair task puts its sample first text (a query, a question) before it."""
        return (self.sample_first, text) if len(self.text_inputs) == 2 else (text,)

    def sample_body(self, text: str = SAMPLE_TEXT) -> str:
        """A KServe v2 JSON request with one row, for curl examples (a pair: sample_first, then the text)."""
        return sample_body(self.text_inputs, list(self.row_for(text)))

    def client_request(self, top_k: int) -> tuple[list[str] | None, int]:
        """(outputs to ask for, or None for all; Triton classification count per output)."""
        return None, 0

    @abc.abstractmethod
    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        """One JSON-able answer per text, from the arrays a request returned."""

    @abc.abstractmethod
    def summary_line(self, row: dict) -> str:
        """One row in a few words, for the client scripts."""


def sample_body(text_inputs: tuple[TensorSpec, ...], texts: list[str] | None = None) -> str:
    """A KServe v2 JSON request of one row: one text per input (the sample text in each by default)."""
    texts = texts or [SAMPLE_TEXT] * len(text_inputs)
    return json.dumps({"inputs": [{"name": t.name, "shape": [1, 1], "datatype": "BYTES", "data": [x]}
                                  for t, x in zip(text_inputs, texts)]})


def json_cells(arr: np.ndarray) -> list:
    """BYTES cells holding one JSON document each (entities, an answer), decoded in order."""
    return [json.loads(c.decode("utf-8") if isinstance(c, bytes) else str(c)) for c in np.asarray(arr).reshape(-1)]


class OneVectorPerRow:
    """What a task that answers one float32 vector per row under `vector_output` reads of its answers (a base
    beside TaskContract: embedders, image-text models)."""

    vector_output: ClassVar[str] = "embedding"

    def vectors(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        """One float32 vector per row, as served (no copy)."""
        return outputs[self.vector_output]

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{self.vector_output: np.asarray(v, dtype=np.float32).tolist()} for v in outputs[self.vector_output]]

    def summary_line(self, row: dict) -> str:
        vec = np.asarray(row[self.vector_output])
        head = ", ".join(f"{v:+.4f}" for v in vec[:4])
        return f"dim {vec.size}  norm {np.linalg.norm(vec):.3f}  [{head}, ...]"
