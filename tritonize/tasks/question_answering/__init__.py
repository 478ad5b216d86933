"""Extractive question answering: task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, CONTEXT_INPUT, OUTPUT, QUESTION_INPUT, Head
from .task import TASK

__all__ = ["ANSWERS", "CONTEXT_INPUT", "OUTPUT", "QUESTION_INPUT", "Head", "TASK"]
