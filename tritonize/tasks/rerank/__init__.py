"""Reranking: task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, OUTPUT, QUERY_INPUT, Head
from .task import TASK

__all__ = ["ANSWERS", "OUTPUT", "QUERY_INPUT", "Head", "TASK"]
