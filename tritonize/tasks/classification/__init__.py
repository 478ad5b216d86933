"""Sequence classification: task.py builds and verifies its repository; contract.py reads its answers, calls.py and
api.py are its client calls and HTTP routes. task.py is imported only when a build asks for it."""

from .. import build_side
from .contract import LOGITS, PROBABILITIES, CONTRACT, Head, Label, parse_classes

__all__ = ["CONTRACT", "LOGITS", "PROBABILITIES", "Head", "Label", "parse_classes", "TASK"]

__getattr__ = build_side(__name__, ("TASK",))
