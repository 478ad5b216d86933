"""Sequence classification: task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, LOGITS, PROBABILITIES, Head, Label, parse_classes
from .task import TASK

__all__ = ["ANSWERS", "LOGITS", "PROBABILITIES", "Head", "Label", "parse_classes", "TASK"]
