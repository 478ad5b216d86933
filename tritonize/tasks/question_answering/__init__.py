"""Extractive question answering: task.py builds and verifies its repository; contract.py reads its answers, calls.py
and api.py are its client calls and HTTP routes. task.py is imported only when a build asks for it."""

from .. import build_side
from .contract import CONTEXT_INPUT, OUTPUT, CONTRACT, QUESTION_INPUT, Head

__all__ = ["CONTRACT", "CONTEXT_INPUT", "OUTPUT", "QUESTION_INPUT", "Head", "TASK"]

__getattr__ = build_side(__name__, ("TASK",))
