"""Cohere's embed (v2) and Cohere's and Jina's rerank."""

from __future__ import annotations

import base64
import uuid

from fastapi import APIRouter, Request

from .. import schemas as s
from ..errors import invalid
from ..state import state_of
from .common import (
    EMBEDDING,
    INFERS,
    RANGES_DOCUMENTED,
    RANKING,
    answered,
    documented,
    embed,
    input_prompt,
    matryoshka,
    quantized,
    ranked,
    refuse_truncated,
    scores,
    texts_of,
    tokens,
)

router = APIRouter(tags=["Cohere / Jina"])
EMBED_PATH = "/v2/embed"
API_VERSION = "2"


@router.post(EMBED_PATH, responses={**documented(s.CohereError, INFERS), **RANGES_DOCUMENTED})
@answered
async def cohere_embed(body: s.CohereEmbedRequest, request: Request) -> s.CohereEmbedResponse:
    """Each embedding type asked for, from one inference: float, base64 (the float32 bytes), and int8, uint8,
    binary, ubinary as sentence-transformers' quantize_embeddings computes them."""
    state = state_of(request)
    model = state.catalog.find(EMBEDDING, body.model)
    if body.images or body.inputs:
        raise invalid(f"{model.name} embeds texts only: send `texts`", "images" if body.images else "inputs", 400)
    if body.truncate == "START":
        raise invalid("truncate START is not served: the model's tokenizer cuts long texts on the right (END)",
                      "truncate", 400)
    if body.max_tokens is not None and body.max_tokens < model.max_length:
        raise invalid(f"max_tokens {body.max_tokens} is not served: {model.name} reads the first {model.max_length} "
                      "tokens of each text (truncate NONE refuses a longer one)", "max_tokens", 400)
    if not body.embedding_types:
        raise invalid("`embedding_types` must not be empty", "embedding_types", 422)
    if body.output_dimension is not None and body.output_dimension < 1:
        raise invalid("`output_dimension` must be at least 1", "output_dimension", 400)
    texts = texts_of(body.texts, "texts", state.settings.max_client_batch_size)
    vectors, answer = await embed(state, request, model, texts, input_prompt(model, body.input_type))
    refuse_truncated(answer, False if body.truncate == "NONE" else None, model)
    vectors = matryoshka(vectors, model, body.output_dimension, "output_dimension")
    embeddings: dict = {}
    for kind in dict.fromkeys(body.embedding_types):
        if kind == "float":
            embeddings[kind] = vectors
        elif kind == "base64":
            embeddings[kind] = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
        else:
            embeddings[kind] = quantized(request, model, vectors, kind, "embedding_types")
    return s.CohereEmbedResponse.model_construct(
        id=str(uuid.uuid4()), embeddings=embeddings, texts=texts,
        meta=s.CohereMeta.model_construct(api_version=s.CohereApiVersion.model_construct(version=API_VERSION),
                                          billed_units=s.CohereBilledUnits.model_construct(input_tokens=tokens(answer))))


@router.post("/v1/rerank", responses=documented(s.OpenAIError, INFERS))
@router.post("/v2/rerank", responses=documented(s.OpenAIError, INFERS), include_in_schema=False)
@answered
async def cohere_rerank(body: s.RerankRequest, request: Request) -> s.RerankResponse:
    state = state_of(request)
    model = state.catalog.find(RANKING, body.model)
    if not body.query:
        raise invalid("`query` must not be empty", "query", 422)
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
