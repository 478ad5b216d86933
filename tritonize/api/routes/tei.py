"""text-embeddings-inference's routes, in its shapes and error envelope."""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Query, Request

from .. import schemas as s
from ..errors import invalid
from ..state import state_of
from .common import (
    CLASSIFICATION,
    EMBEDDING,
    GUARDED,
    INFERS,
    RERANK,
    SPARSE,
    answered,
    documented,
    embed,
    matryoshka,
    prompt_of,
    ranked,
    refuse_truncated,
    right_only,
    run,
    scores,
    texts_of,
)

router = APIRouter(tags=["text-embeddings-inference"])


@router.post("/embed", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed(body: s.TEIEmbedRequest, request: Request) -> s.TEIEmbeddings:
    state = state_of(request)
    model = state.catalog.find(EMBEDDING, body.model)
    right_only(body.truncation_direction)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    if not body.normalize and model.head.normalize:
        raise invalid(f"normalize false is not served: {model.name} normalises inside its graph (its Normalize "
                      "module), so only unit vectors exist to return", "normalize")
    vectors, answer = await embed(state, request, model, texts, prompt_of(model, body.prompt_name))
    refuse_truncated(answer, body.truncate, model)
    vectors = matryoshka(vectors, model, body.dimensions)
    if body.normalize and not model.head.normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return s.TEIEmbeddings.model_construct(vectors)


@router.post("/embed_sparse", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed_sparse(body: s.TEISparseRequest, request: Request) -> s.TEISparseEmbeddings:
    """SPLADE terms as text-embeddings-inference returns them: per text, `[{"index", "value"}]`, ascending ids."""
    state = state_of(request)
    model = state.catalog.find(SPARSE, body.model)
    right_only(body.truncation_direction)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    prompt = prompt_of(model, body.prompt_name)
    answer = await run(state, request, model, [(prompt + t,) for t in texts])
    refuse_truncated(answer, body.truncate, model)
    return s.TEISparseEmbeddings.model_construct(SPARSE.terms(answer))


@router.post("/rerank", responses=documented(s.TEIError, INFERS))
@answered
async def tei_rerank(body: s.TEIRerankRequest, request: Request) -> s.TEIRanks:
    state = state_of(request)
    model = state.catalog.find(RERANK, body.model)
    right_only(body.truncation_direction)
    if body.raw_scores and model.head.activation != "identity":
        raise invalid(f"raw_scores is not served for {model.name}: its graph applies the CrossEncoder's "
                      f"{model.head.activation}, and inverting it would not give the model's logits exactly",
                      "raw_scores")
    docs = texts_of(body.texts, "texts", state.settings.max_client_batch_size)
    values, answer = await scores(state, request, model, body.query, docs)
    refuse_truncated(answer, body.truncate, model)
    return s.TEIRanks.model_construct([
        s.TEIRank.model_construct(index=i, score=float(values[i]), **({"text": docs[i]} if body.return_text else {}))
        for i in ranked(values, None)])


@router.post("/predict", responses=documented(s.TEIError, INFERS))
@answered
async def tei_predict(body: s.TEIPredictRequest, request: Request) -> s.TEIPredictions:
    state = state_of(request)
    model = state.catalog.find(CLASSIFICATION, body.model)
    right_only(body.truncation_direction)
    single = isinstance(body.inputs, str)
    raw: list = [body.inputs] if single else list(body.inputs)
    if any(isinstance(x, list) and len(x) != 1 for x in raw):
        raise invalid(f"{model.name} classifies one text per input; pairs are not served", "inputs")
    texts = texts_of([x[0] if isinstance(x, list) else x for x in raw], "inputs", state.settings.max_client_batch_size)
    answer = await run(state, request, model, [(t,) for t in texts])
    refuse_truncated(answer, body.truncate, model)
    labels = model.head.labels
    rows = [[s.TEIPrediction.model_construct(score=float(row[j]), label=labels[j])
             for j in np.argsort(-row, kind="stable")]
            for row in CLASSIFICATION.scores(answer, raw=body.raw_scores)]
    return s.TEIPredictions.model_construct(rows[0] if single else rows)


@router.post("/tokenize", responses=documented(s.TEIError, (*GUARDED, 400, 404, 422)))
@answered
async def tei_tokenize(body: s.TEITokenizeRequest, request: Request) -> s.TEITokens:
    state = state_of(request)
    model = state.catalog.find_any(body.model)
    request.state.model = model.name
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    prompt = prompt_of(model, body.prompt_name) if body.prompt_name else ""
    tokenizer = state.tokenizer(model)
    out = []
    for text in texts:
        text = prompt + text
        enc = tokenizer.encode(text, add_special_tokens=body.add_special_tokens)
        out.append([
            s.TEIToken.model_construct(id=i, text=tok, special=True, start=None, stop=None) if special else
            s.TEIToken.model_construct(id=i, text=text[a:b], special=False, start=a, stop=b)
            for i, tok, special, (a, b) in zip(enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets)])
    return s.TEITokens.model_construct(out)


@router.get("/info", responses=documented(s.TEIError, (*GUARDED, 400, 404)))
@answered
async def tei_info(request: Request, model: str | None = Query(None)) -> s.TEIInfo:
    state = state_of(request)
    return state.info(state.catalog.find_any(model))
