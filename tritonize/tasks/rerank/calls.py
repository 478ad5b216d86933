"""The client's rerank call (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...spec import TEXT_INPUT
from ..calls import Infer, Parameter, Text
from .contract import ACTIVATION_PARAMETER, OUTPUT, QUERY_INPUT, activate

ACTIVATION = Parameter(ACTIVATION_PARAMETER, "{model} declares no activation: it is not a reranker, or it was "
                                             "written before rerankers served their logits (generate it again)")


def rerank_inputs(query: Text, documents: Sequence[Text]) -> dict[str, list[Text]]:
    """One (query, document) pair per row, as a reranker takes them."""
    return {QUERY_INPUT: [query] * len(documents), TEXT_INPUT: list(documents)}


def rerank(query: Text, documents: Sequence[Text], raw: bool = False):
    """One relevance score per document for `query`, [len(documents)] float32 (higher is more relevant): what
    CrossEncoder.predict returns, the model's activation (from its ensemble's configuration) of the served
    logits; with `raw`, the logits themselves."""
    asked = Infer(rerank_inputs(query, documents), [OUTPUT])
    if raw:
        return (yield asked)[OUTPUT].reshape(-1)
    answer, activation = yield (asked, ACTIVATION)
    return activate(answer[OUTPUT].reshape(-1), activation).astype(np.float32)


CALLS = (rerank,)
