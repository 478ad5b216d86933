"""Cohere's and Jina's rerank (Cohere's embed is the embedding task's: tasks/embedding/api.py)."""

from __future__ import annotations

import uuid

from fastapi import Request

from .. import schemas as s
from ..errors import invalid
from ..state import state_of
from .families import COHERE_RERANK, Router
from .inference import ranked, ranking, scores, tokens
from .parameters import blank, texts_of
from .responses import INFERS, answered, documented

router = Router(COHERE_RERANK)
@router.post("/v1/rerank", responses=documented(s.OpenAIError, INFERS))
@router.post("/v2/rerank", responses=documented(s.OpenAIError, INFERS), include_in_schema=False)
@answered
async def cohere_rerank(body: s.RerankRequest, request: Request) -> s.RerankResponse:
    state = state_of(request)
    model = state.catalog.find(ranking(), body.model)
    if not body.query or blank(body.query):
        raise invalid("`query` must not be empty or blank", "query", 422)
    docs = texts_of([d if isinstance(d, str) else d.text for d in body.documents], "documents",
                    state.settings.max_client_batch_size)
    values, answer = await scores(state, request, model, body.query, docs)
    results = [s.RerankResult.model_construct(index=i, relevance_score=float(values[i]),
                                              **({"document": s.Document.model_construct(text=docs[i])}
                                                 if body.return_documents else {}))
               for i in ranked(values, body.top_n)]
    used = tokens(answer)
    return s.RerankResponse.model_construct(
        id=str(uuid.uuid4()), model=model.name, results=results, usage=s.RerankUsage.model_construct(total_tokens=used),
        meta=s.RerankMeta.model_construct(billed_units=s.BilledUnits.model_construct(search_units=1),
                                          tokens=s.InputTokens.model_construct(input_tokens=used)))
