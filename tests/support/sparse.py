"""The sparse (SPLADE) tests' texts and reference: sentence-transformers' SparseEncoder, term by term."""


from __future__ import annotations

from pathlib import Path

import numpy as np

ATOL = 1e-4
TEXTS = ["hello world", "Ünïcödé café — 日本語のテキスト 🚀", "a",
         " ".join(["The server keeps serving after bad input, and batching merges requests."] * 8)]


def encode(folder: Path, texts: list[str]) -> np.ndarray:
    from sentence_transformers import SparseEncoder

    return SparseEncoder(str(folder), device="cpu").encode(texts, convert_to_sparse_tensor=False).numpy()


def assert_same_terms(got: list, expected: np.ndarray) -> None:
    """Per text: the non-zero terms encode returns, ascending, with their weights."""
    assert len(got) == len(expected)
    for vector, want in zip(got, expected):
        assert vector.indices.tolist() == np.flatnonzero(want).tolist()
        assert np.abs(vector.values - want[vector.indices]).max() <= ATOL
        assert np.abs(vector.dense(len(want)) - want).max() <= ATOL
