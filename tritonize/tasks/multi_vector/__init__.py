"""Late-interaction (ColBERT) embeddings: task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, COUNTS, SIMILARITY_PARAMETER, VECTORS, Head, maxsim, vectors
from .task import TASK

__all__ = ["ANSWERS", "COUNTS", "SIMILARITY_PARAMETER", "VECTORS", "Head", "maxsim", "vectors", "TASK"]
