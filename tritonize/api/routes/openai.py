"""OpenAI's model list (its embeddings are the embedding task's: tasks/embedding/api.py)."""

from __future__ import annotations

from fastapi import Request

from .. import schemas as s
from ..state import state_of
from .families import OPENAI, Router
from .responses import GUARDED, answered, documented

router = Router(OPENAI)


@router.get("/v1/models", responses=documented(s.OpenAIError, GUARDED))
@answered
async def openai_models(request: Request) -> s.ModelList:
    return s.ModelList.model_construct(data=[
        s.ModelCard.model_construct(id=m.name, created=m.created, task=m.contract.name)
        for m in state_of(request).catalog.models])
