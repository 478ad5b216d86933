"""OpenAI's embeddings and model list."""

from __future__ import annotations

import base64
from collections.abc import Sequence

from fastapi import APIRouter, Request

from .. import schemas as s
from ..errors import invalid
from ..state import state_of
from .common import (
    EMBEDDING,
    GUARDED,
    INFERS,
    RANGES_DOCUMENTED,
    answered,
    documented,
    embed,
    input_prompt,
    matryoshka,
    quantized,
    texts_of,
    tokens,
)

router = APIRouter(tags=["OpenAI"])


@router.post("/v1/embeddings", responses={**documented(s.OpenAIError, INFERS), **RANGES_DOCUMENTED})
@answered
async def openai_embeddings(body: s.EmbeddingRequest, request: Request) -> s.EmbeddingResponse:
    """float32 vectors, their bytes in base64, or an int8, uint8, binary or ubinary embedding's bytes in base64;
    `input_type` (NVIDIA NIM's query | passage) selects the prompt the model declares for it."""
    state = state_of(request)
    model = state.catalog.find(EMBEDDING, body.model)
    texts = texts_of(body.input, "input", state.settings.max_client_batch_size)
    if body.dimensions is not None and body.dimensions < 1:
        raise invalid("`dimensions` must be at least 1", "dimensions", 400)
    vectors, answer = await embed(state, request, model, texts, input_prompt(model, body.input_type))
    vectors = matryoshka(vectors, model, body.dimensions)
    if body.encoding_format == "float":
        rows: Sequence = vectors
    elif body.encoding_format == "base64":
        rows = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    else:
        rows = [base64.b64encode(v.tobytes()).decode("ascii")
                for v in quantized(request, model, vectors, body.encoding_format, "encoding_format")]
    used = tokens(answer)
    return s.EmbeddingResponse.model_construct(
        data=[s.Embedding(object="embedding", index=i, embedding=row) for i, row in enumerate(rows)],
        model=model.name, usage=s.Usage.model_construct(prompt_tokens=used, total_tokens=used))


@router.get("/v1/models", responses=documented(s.OpenAIError, GUARDED))
@answered
async def openai_models(request: Request) -> s.ModelList:
    return s.ModelList.model_construct(data=[
        s.ModelCard.model_construct(id=m.name, created=m.created, task=m.answers.name)
        for m in state_of(request).catalog.models])
