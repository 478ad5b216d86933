"""Token classification (NER): task.py builds and verifies its repository; contract.py reads its answers, calls.py and
api.py are its client calls and HTTP routes. task.py is imported only when a build asks for it."""

from .. import build_side
from .contract import OUTPUT, CONTRACT, Head

__all__ = ["CONTRACT", "OUTPUT", "Head", "AGGREGATIONS", "TASK"]

__getattr__ = build_side(__name__, ("AGGREGATIONS", "TASK"))
