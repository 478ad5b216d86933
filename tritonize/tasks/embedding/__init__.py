"""Sentence embeddings: task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, OUTPUT, Head, truncate_embeddings
from .task import POOLINGS, TASK

__all__ = ["ANSWERS", "OUTPUT", "Head", "truncate_embeddings", "POOLINGS", "TASK"]
