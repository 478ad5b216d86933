"""vLLM's score API (/score, /v1/score): a score for each pair of texts.

The pairs are vLLM's: `text_1` one text against each of `text_2`, or two lists of equal length paired in
order. How a pair list is scored is one function per kind of model (each task's api.py SCORER): a
cross-encoder or an LLM reranker scores each pair in one pass through its ensemble (the rerank task), the
score `CrossEncoder.predict` returns (with `use_activation: false`, its logit); a late-interaction model
encodes each text once and scores the pairs by MaxSim, the score its `similarity` returns.
"""

from __future__ import annotations

import time
import uuid

from fastapi import Request

from .. import schemas as s
from ..errors import invalid
from ..state import state_of
from .families import VLLM, Router
from .inference import ranking, scorers, tokens
from .parameters import texts_of
from .responses import INFERS, answered, documented

router = Router(VLLM)

Pairs = list[tuple[str, str]]


# The names vLLM's score requests give the two sides of each pair, in the order its protocol tries them.
SIDES = (("text_1", "text_2"), ("queries", "documents"), ("data_1", "data_2"))


def sides(body: s.ScoreRequest) -> tuple[tuple[str, object], tuple[str, object]]:
    """The one pair of fields a request sends: ((name, value), (name, value))."""
    sent = [names for names in SIDES if any(getattr(body, n) is not None for n in names)]
    if len(sent) != 1 or any(getattr(body, n) is None for n in sent[0]):
        raise invalid("send the pairs' two sides as text_1 and text_2 (or queries and documents, or data_1 and "
                      "data_2), one pair of names", "text_1")
    first, second = sent[0]
    return (first, getattr(body, first)), (second, getattr(body, second))


def score_pairs(body: s.ScoreRequest, limit: int) -> Pairs:
    """vLLM's pairing: the first side's one text against every text of the second (1:1, 1:N), or equal-length
    lists in order (N:N)."""
    (first, text_1), (second, text_2) = sides(body)
    firsts = texts_of(text_1, first, limit)
    seconds = texts_of(text_2, second, limit)
    if len(firsts) > 1 and len(firsts) != len(seconds):
        raise invalid(f"{first} holds {len(firsts)} texts and {second} {len(seconds)}: the lengths must be 1:1, "
                      "1:N or N:N", second)
    return list(zip(firsts * len(seconds) if len(firsts) == 1 else firsts, seconds))


@router.post("/score", responses=documented(s.OpenAIError, INFERS))
@router.post("/v1/score", responses=documented(s.OpenAIError, INFERS), include_in_schema=False)
@answered
async def score(body: s.ScoreRequest, request: Request) -> s.ScoreResponse:
    state = state_of(request)
    model = state.catalog.find(ranking(), body.model)
    pairs = score_pairs(body, state.settings.max_client_batch_size)
    values, answer = await scorers()[model.contract](state, request, model, pairs, body.use_activation is False)
    used = tokens(answer)
    return s.ScoreResponse.model_construct(
        id=f"score-{uuid.uuid4().hex}", created=int(time.time()), model=model.name,
        data=[s.ScoreData.model_construct(index=i, score=float(v)) for i, v in enumerate(values)],
        usage=s.Usage.model_construct(prompt_tokens=used, total_tokens=used))
