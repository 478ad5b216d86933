"""tritonize's own routes: entities and extractive answers."""

from __future__ import annotations

from fastapi import APIRouter, Request

from .. import schemas as s
from ..state import state_of
from .common import ANSWERS, ENTITIES, INFERS, answered, documented, run, texts_of

router = APIRouter(tags=["tritonize"])


@router.post("/v1/entities", responses=documented(s.OpenAIError, INFERS))
@answered
async def entities(body: s.EntitiesRequest, request: Request) -> s.EntitiesResponse:
    state = state_of(request)
    model = state.catalog.find(ENTITIES, body.model)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    found = ENTITIES.entities(await run(state, request, model, [(t,) for t in texts]))
    return s.EntitiesResponse.model_construct(model=model.name, data=[
        s.EntitiesResult.model_construct(index=i, entities=e) for i, e in enumerate(found)])


@router.post("/v1/answers", responses=documented(s.OpenAIError, INFERS))
@answered
async def answers(body: s.AnswersRequest, request: Request) -> s.AnswersResponse:
    state = state_of(request)
    model = state.catalog.find(ANSWERS, body.model)
    pairs = [body.inputs] if isinstance(body.inputs, s.QAPair) else list(body.inputs)
    questions = texts_of([p.question for p in pairs], "question", state.settings.max_client_batch_size)
    contexts = texts_of([p.context for p in pairs], "context", state.settings.max_client_batch_size)
    found = ANSWERS.spans(await run(state, request, model, list(zip(questions, contexts))))
    return s.AnswersResponse.model_construct(model=model.name, data=[
        s.AnswerResult.model_construct(index=i, answer=a) for i, a in enumerate(found)])
