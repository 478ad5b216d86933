"""Sparse embeddings (SPLADE): task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, INDICES, VALUES, Head, SparseVector, vectors
from .task import TASK

__all__ = ["ANSWERS", "INDICES", "VALUES", "Head", "SparseVector", "vectors", "TASK"]
