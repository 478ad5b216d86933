"""Reading late-interaction (ColBERT) answers: each text's scored vectors, one per token, and MaxSim over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...serving.multi_vector import FORM_INPUT, FORMS, Form
from ...spec import TEXT_INPUT, TensorSpec
from ...spec import Head as BaseHead
from ..contract import TaskContract

VECTORS = "token_vectors"  # FP32 [N, T, dim]: each row's scored vectors in token order, then zero rows
COUNTS = "vector_counts"  # INT32 [N, 1]: how many of a row's vectors are real
QUERY, DOCUMENT = FORMS  # a text is encoded as a query, or as a document (the form where none is named)
# The ensemble's configuration parameter naming the similarity, so a client scores as the model does.
SIMILARITY_PARAMETER = "similarity"
Similarity = Literal["maxsim", "meanmaxsim"]


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "multi-vector"
    dim: int  # the width of each token's vector
    similarity: Similarity  # the model's similarity_fn_name: MaxSim, or MaxSim divided by the query's vectors
    forms: tuple[Form, ...]  # how a query and a document are prepared (serving/multi_vector.py)

    def maxsim(self, query: np.ndarray, documents: list[np.ndarray]) -> np.ndarray:
        """One query's vectors against each document's, as the model's `similarity` scores them."""
        return maxsim(query, documents, self.similarity)


def maxsim(query: np.ndarray, documents: list[np.ndarray], similarity: Similarity = "maxsim") -> np.ndarray:
    """One query's vectors [n, dim] against each document's -> [len(documents)] float32 scores: the sum over the
    query's vectors of the best dot product with a document's (divided by the query's vectors for meanmaxsim)."""
    query = np.asarray(query, dtype=np.float32)
    scores = np.array([(query @ np.asarray(d, dtype=np.float32).T).max(axis=1).sum() if len(d) else 0.0
                       for d in documents], dtype=np.float32)
    return scores / max(len(query), 1) if similarity == "meanmaxsim" else scores


def vectors(outputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """A request's `token_vectors` and `vector_counts` -> each text's real vectors, [n_i, dim] float32."""
    counts = np.asarray(outputs[COUNTS]).reshape(-1)
    return [np.asarray(v[:n], dtype=np.float32) for v, n in zip(outputs[VECTORS], counts)]


class MultiVectorContract(TaskContract):
    rollout = None
    head_type = Head
    output_names = (VECTORS, COUNTS)
    output_statistics = {"tritonize_output_vectors_per_text": COUNTS}
    statistics_module = "multi_vector_statistics"
    text_inputs = (TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,)), TensorSpec(FORM_INPUT, "TYPE_STRING", (1,)))

    def head_from_dict(self, data: dict) -> Head:  # type: ignore[override]
        """Its forms back from their dicts as well."""
        forms = tuple(Form(**{k: tuple(v) if isinstance(v, list) else v for k, v in dict(f).items()})
                      for f in data["forms"])
        return Head(int(data["dim"]), data["similarity"], forms)

    def row_for(self, text: str) -> tuple[str, ...]:
        """A text as a document (a query is asked for by name)."""
        return (text, DOCUMENT)

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{VECTORS: v.tolist()} for v in vectors(outputs)]

    def summary_line(self, row: dict) -> str:
        vecs = np.asarray(row[VECTORS], dtype=np.float32).reshape(len(row[VECTORS]), -1)
        norms = np.linalg.norm(vecs, axis=1) if len(vecs) else np.zeros(0)
        shown = f"  norms {norms.min():.3f}..{norms.max():.3f}" if len(norms) else ""
        return f"{len(vecs)} vectors of dim {vecs.shape[1] if len(vecs) else 0}{shown}"


CONTRACT = MultiVectorContract()
