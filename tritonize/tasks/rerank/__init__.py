"""Reranking: task.py builds and verifies its repository; answers.py reads its answers, calls.py and api.py are its
client calls and HTTP routes. task.py is imported only when a build asks for it."""

from .. import build_side
from .answers import ANSWERS, OUTPUT, QUERY_INPUT, Head

__all__ = ["ANSWERS", "OUTPUT", "QUERY_INPUT", "Head", "TASK"]

__getattr__ = build_side(__name__, ("TASK",))
