"""The client's question-answering calls (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Sequence

from ..calls import Infer, Text
from .contract import CONTEXT_INPUT, OUTPUT, CONTRACT, QUESTION_INPUT


def answers(questions: Sequence[Text], contexts: Sequence[Text]):
    """One answer per (question, context) pair, in one request."""
    inputs = {QUESTION_INPUT: list(questions), CONTEXT_INPUT: list(contexts)}
    return [row[OUTPUT] for row in CONTRACT.rows((yield Infer(inputs, [OUTPUT])))]


def answer(question: Text, context: Text):
    """The span of `context` that answers `question`: {"answer", "score", "start", "end"} (None: no span)."""
    return (yield from answers([question], [context]))[0]


CALLS = (answer, answers)
