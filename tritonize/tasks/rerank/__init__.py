"""Reranking: task.py builds and verifies its repository; contract.py reads its answers, calls.py and api.py are its
client calls and HTTP routes. task.py is imported only when a build asks for it."""

from .. import build_side
from .contract import OUTPUT, CONTRACT, QUERY_INPUT, Head

__all__ = ["CONTRACT", "OUTPUT", "QUERY_INPUT", "Head", "TASK"]

__getattr__ = build_side(__name__, ("TASK",))
