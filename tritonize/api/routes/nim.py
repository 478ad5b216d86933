"""NVIDIA NIM's reranking API (/v1/ranking), in its shapes and error envelope."""

from __future__ import annotations

from fastapi import Request

from .. import schemas as s
from ..state import state_of
from .families import NIM, Router
from .inference import ranked, ranking, refuse_truncated, scores, tokens
from .parameters import texts_of
from .responses import INFERS, answered, documented

router = Router(NIM)


@router.post("/v1/ranking", responses=documented(s.NIMError, INFERS))
@answered
async def nim_ranking(body: s.NIMRankingRequest, request: Request) -> s.NIMRankingResponse:
    """Every passage by the model's logit, best first: NIM's `logit` is the raw score, before the activation
    (a CrossEncoder's sigmoid) the other ranking routes apply."""
    state = state_of(request)
    model = state.catalog.find(ranking(), body.model)
    query = texts_of(body.query.text, "query.text", 1)[0]
    passages = texts_of([p.text for p in body.passages], "passages", state.settings.max_client_batch_size)
    values, answer = await scores(state, request, model, query, passages, raw=True)
    refuse_truncated(answer, body.truncate == "END", model, 400, body.truncate)
    used = tokens(answer)
    return s.NIMRankingResponse.model_construct(
        rankings=[s.NIMRanking.model_construct(index=i, logit=float(values[i])) for i in ranked(values, None)],
        usage=s.Usage.model_construct(prompt_tokens=used, total_tokens=used))
