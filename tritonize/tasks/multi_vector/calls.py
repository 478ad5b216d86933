"""The client's late-interaction calls (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Sequence

from ...serving.multi_vector import FORM_INPUT
from ...spec import TEXT_INPUT
from ..calls import Infer, Parameter, Text
from .contract import COUNTS, DOCUMENT, QUERY, SIMILARITY_PARAMETER, VECTORS, maxsim, vectors

SIMILARITY = Parameter(SIMILARITY_PARAMETER, "{model} declares no similarity: it is not a late-interaction model")


def multi_vector_inputs(texts: Sequence[Text], form: str) -> dict[str, list[Text]]:
    """Each text with its form (query or document), as a late-interaction model takes them."""
    return {TEXT_INPUT: list(texts), FORM_INPUT: [form] * len(texts)}


def multi_vector(texts: Sequence[Text], form: str = DOCUMENT):
    """A late-interaction model's vectors: per text, one [n, dim] float32 row per scored token, as
    MultiVectorEncoder.encode_query (form "query") or encode_document (form "document") returns them."""
    return vectors((yield Infer(multi_vector_inputs(texts, form), [VECTORS, COUNTS])))


def score(query: Text, documents: Sequence[Text]):
    """One late-interaction score per document for `query`, [len(documents)] float32: MaxSim (or MeanMaxSim,
    as the model declares) over the served vectors, as MultiVectorEncoder.similarity scores them (the query's
    and the documents' requests in flight together where the client is asynchronous)."""
    asked, answered, similarity = yield (Infer(multi_vector_inputs([query], QUERY), [VECTORS, COUNTS]),
                                         Infer(multi_vector_inputs(documents, DOCUMENT), [VECTORS, COUNTS]),
                                         SIMILARITY)
    return maxsim(vectors(asked)[0], vectors(answered), similarity)


def similarity():
    """The similarity a late-interaction model scores with, from its ensemble's configuration."""
    return (yield SIMILARITY)


CALLS = (multi_vector, score, similarity)
