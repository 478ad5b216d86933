"""The client's token-classification call (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Iterable

from ..calls import Infer, Text
from .contract import OUTPUT, CONTRACT


def entities(texts: Iterable[Text]):
    """Per text, the entities the token classifier found: entity_group (or entity), score, word, start, end."""
    return [row[OUTPUT] for row in CONTRACT.rows((yield Infer(texts, [OUTPUT])))]


CALLS = (entities,)
