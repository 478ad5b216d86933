"""Reading sparse embeddings: each text's non-zero vocabulary terms, as `indices` and `values` padded with -1 / 0."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...serving.sparse_embedding import INDICES, VALUES
from ...serving.sparse_embedding import rows as served_rows
from ...spec import Head as BaseHead
from ..contract import TaskContract

Pooling = Literal["max", "sum"]
Activation = Literal["relu", "log1p_relu"]


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "sparse-embedding"
    pooling: Pooling  # SpladePooling's pooling_strategy over the tokens
    activation: Activation  # relu: log(1 + relu(x)); log1p_relu: log(1 + log(1 + relu(x)))
    vocab: int  # the width of the graph's weights
    max_active_dims: int = 0  # the folder's limit on kept terms per text (0: every non-zero term)
    prompts: tuple[tuple[str, str], ...] = ()  # (name, text) declared by the folder; clients prepend them


@dataclass(frozen=True)
class SparseVector:
    """One text's sparse embedding: its non-zero vocabulary ids, ascending, and their weights."""

    indices: np.ndarray  # int32
    values: np.ndarray  # float32

    def dense(self, dim: int) -> np.ndarray:
        """The full [dim] vector (what SparseEncoder.encode returns, densified)."""
        out = np.zeros(dim, dtype=np.float32)
        out[self.indices] = self.values
        return out

    def pairs(self) -> list[dict]:
        """text-embeddings-inference's /embed_sparse form of one text: [{"index": int, "value": float}]."""
        return [{"index": int(i), "value": float(v)} for i, v in zip(self.indices, self.values)]


def vectors(outputs: dict[str, np.ndarray]) -> list[SparseVector]:
    """A request's `indices` and `values` as one SparseVector per text."""
    return [SparseVector(i, v) for i, v in served_rows(outputs[INDICES], outputs[VALUES])]


class SparseEmbeddingContract(TaskContract):
    rollout = None
    head_type = Head
    output_names = (INDICES, VALUES)
    output_statistics = {"tritonize_output_active_terms": INDICES}
    statistics_module = "sparse_embedding_statistics"

    def terms(self, outputs: dict[str, np.ndarray]) -> list[list[dict]]:
        """Per text, its terms as text-embeddings-inference returns them: `{"index", "value"}`, ids ascending."""
        return [v.pairs() for v in vectors(outputs)]

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{INDICES: v.indices.tolist(), VALUES: v.values.tolist()} for v in vectors(outputs)]

    def summary_line(self, row: dict) -> str:
        top = sorted(zip(row[VALUES], row[INDICES]), reverse=True)[:4]
        shown = ", ".join(f"{i}:{v:.3f}" for v, i in top)
        return f"{len(row[INDICES])} terms  [{shown}{', ...' if len(row[INDICES]) > 4 else ''}]"


CONTRACT = SparseEmbeddingContract()
