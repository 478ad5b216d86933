"""Token classification (NER): task.py builds and verifies its repository, answers.py reads its answers."""

from .answers import ANSWERS, OUTPUT, Head
from .task import AGGREGATIONS, TASK

__all__ = ["ANSWERS", "OUTPUT", "Head", "AGGREGATIONS", "TASK"]
