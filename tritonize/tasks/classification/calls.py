"""The client's classification call (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Iterable

from ..calls import Infer, Text
from .contract import PROBABILITIES, parse_classes


def classify(texts: Iterable[Text], top_k: int = 1):
    """The top_k labels per text, best first, computed by Triton."""
    return parse_classes((yield Infer(texts, [PROBABILITIES], max(1, top_k)))[PROBABILITIES])


CALLS = (classify,)
