"""Late-interaction (ColBERT) embeddings: task.py builds and verifies its repository; contract.py reads its answers,
calls.py and api.py are its client calls and HTTP routes. task.py is imported only when a build asks for it."""

from .. import build_side
from .contract import COUNTS, CONTRACT, SIMILARITY_PARAMETER, VECTORS, Head, maxsim, vectors

__all__ = ["CONTRACT", "COUNTS", "SIMILARITY_PARAMETER", "VECTORS", "Head", "maxsim", "vectors", "TASK"]

__getattr__ = build_side(__name__, ("TASK",))
