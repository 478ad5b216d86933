"""vLLM's score API (/score, /v1/score): a score for each pair of texts.

The pairs are vLLM's: `text_1` one text against each of `text_2`, or two lists of equal length paired in
order. How a pair list is scored is one function per kind of model (`SCORERS`): a cross-encoder or an LLM
reranker scores each pair in one pass through its ensemble (the rerank task), the score `CrossEncoder.predict`
returns.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable

import numpy as np
from fastapi import APIRouter, Request

from ...tasks.answers import Answers
from .. import schemas as s
from ..catalog import ServedModel
from ..errors import invalid
from ..state import ApiState, state_of
from .common import INFERS, RERANK, answered, documented, logits_only, pair_scores, texts_of, tokens

router = APIRouter(tags=["vLLM"])

Pairs = list[tuple[str, str]]
# (state, request, model, pairs) -> (a score per pair, the answer it came in)
PairScorer = Callable[[ApiState, Request, ServedModel, Pairs], Awaitable[tuple[np.ndarray, dict[str, np.ndarray]]]]
SCORERS: dict[Answers, PairScorer] = {RERANK: pair_scores}


def score_pairs(text_1: str | list[str], text_2: str | list[str], limit: int) -> Pairs:
    """vLLM's pairing: one text_1 against every text_2 (1:1, 1:N), or equal-length lists in order (N:N)."""
    firsts = texts_of(text_1, "text_1", limit)
    seconds = texts_of(text_2, "text_2", limit)
    if len(firsts) > 1 and len(firsts) != len(seconds):
        raise invalid(f"text_1 holds {len(firsts)} texts and text_2 {len(seconds)}: the lengths must be 1:1, 1:N "
                      "or N:N", "text_2")
    return list(zip(firsts * len(seconds) if len(firsts) == 1 else firsts, seconds))


@router.post("/score", responses=documented(s.OpenAIError, INFERS))
@router.post("/v1/score", responses=documented(s.OpenAIError, INFERS), include_in_schema=False)
@answered
async def score(body: s.ScoreRequest, request: Request) -> s.ScoreResponse:
    state = state_of(request)
    model = state.catalog.find(RERANK, body.model)
    if body.use_activation is False:
        logits_only(model, "use_activation")
    pairs = score_pairs(body.text_1, body.text_2, state.settings.max_client_batch_size)
    values, answer = await SCORERS[model.answers](state, request, model, pairs)
    used = tokens(answer)
    return s.ScoreResponse.model_construct(
        id=f"score-{uuid.uuid4().hex}", created=int(time.time()), model=model.name,
        data=[s.ScoreData.model_construct(index=i, score=float(v)) for i, v in enumerate(values)],
        usage=s.Usage.model_construct(prompt_tokens=used, total_tokens=used))
