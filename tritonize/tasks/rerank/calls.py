"""The client's rerank call (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Sequence

from ...spec import TEXT_INPUT
from ..calls import Infer, Text
from .contract import OUTPUT, QUERY_INPUT


def rerank_inputs(query: Text, documents: Sequence[Text]) -> dict[str, list[Text]]:
    """One (query, document) pair per row, as a reranker takes them."""
    return {QUERY_INPUT: [query] * len(documents), TEXT_INPUT: list(documents)}


def rerank(query: Text, documents: Sequence[Text]):
    """One relevance score per document for `query`, [len(documents)] float32 (higher is more relevant)."""
    return (yield Infer(rerank_inputs(query, documents), [OUTPUT]))[OUTPUT].reshape(-1)


CALLS = (rerank,)
