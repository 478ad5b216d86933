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
    MULTI_VECTOR,
    RANKING,
    SPARSE,
    answered,
    documented,
    embed,
    logits_only,
    matryoshka,
    multi_vector,
    multi_vectors,
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
    model = state.catalog.find(RANKING, body.model)
    right_only(body.truncation_direction)
    if body.raw_scores:
        logits_only(model, "raw_scores")
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


@router.post("/similarity", responses=documented(s.TEIError, INFERS))
@answered
async def tei_similarity(body: s.TEISimilarityRequest, request: Request) -> s.TEISimilarities:
    """As text-embeddings-inference computes it: the source sentence and the sentences embedded together, then
    the cosine of each sentence's vector with the source's (a cosine, so the graph's normalisation changes
    nothing)."""
    state = state_of(request)
    model = state.catalog.find(EMBEDDING, body.model)
    parameters = body.parameters or s.TEISimilarityParameters()
    right_only(parameters.truncation_direction)
    sentences = texts_of(body.inputs.sentences, "inputs.sentences", state.settings.max_client_batch_size)
    source = texts_of(body.inputs.source_sentence, "inputs.source_sentence", 1)
    vectors, answer = await embed(state, request, model, source + sentences, prompt_of(model, parameters.prompt_name))
    refuse_truncated(answer, parameters.truncate, model)
    return s.TEISimilarities.model_construct(cosines(vectors[0], vectors[1:]).tolist())


def cosines(source: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The cosine of each row of `others` with `source`, in float64 (0 for a zero vector)."""
    source, others = source.astype(np.float64), others.astype(np.float64)
    norms = np.linalg.norm(others, axis=1) * np.linalg.norm(source)
    return np.divide(others @ source, norms, out=np.zeros(len(others)), where=norms > 0)


@router.post("/embed_all", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed_all(body: s.TEIEmbedAllRequest, request: Request) -> s.TEITokenStates:
    """A vector per token, where the served answer carries them: a late-interaction model's scored vectors, each
    text as a document unless `prompt_name` names the query form. An embedder pools inside its graph, so its
    per-token states never leave it: refused."""
    state = state_of(request)
    model = state.catalog.find((EMBEDDING, MULTI_VECTOR), body.model)
    right_only(body.truncation_direction)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    if model.answers is not MULTI_VECTOR:
        prompt_of(model, body.prompt_name)
        raise invalid(f"embed_all is not served for {model.name}: its graph pools the token states inside "
                      f"({model.head.pooling} pooling) and returns one vector per text; /embed returns those")
    forms = multi_vector.FORMS
    if body.prompt_name not in (None, *forms):
        raise invalid(f"prompt_name {body.prompt_name!r} is not a form of {model.name}: {' or '.join(forms)}",
                      "prompt_name")
    vectors, answer = await multi_vectors(state, request, model, texts, body.prompt_name or multi_vector.DOCUMENT)
    refuse_truncated(answer, body.truncate, model)
    return s.TEITokenStates.model_construct(vectors)


@router.post("/decode", responses=documented(s.TEIError, (*GUARDED, 400, 404, 422)))
@answered
async def tei_decode(body: s.TEIDecodeRequest, request: Request) -> s.TEIDecoded:
    """Token ids back to text with the served tokenizer file, as text-embeddings-inference decodes them; an id
    the vocabulary does not hold is refused (the tokenizer would drop it silently)."""
    state = state_of(request)
    model = state.catalog.find_any(body.model)
    request.state.model = model.name
    rows = body.ids if body.ids and isinstance(body.ids[0], list) else [body.ids]
    if len(rows) > state.settings.max_client_batch_size:
        raise invalid(f"`ids` holds {len(rows)} lists, over this server's limit of "
                      f"{state.settings.max_client_batch_size} per request (--max-client-batch-size)", "ids", 413)
    tokenizer = state.tokenizer(model)
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    unknown = sorted({i for row in rows for i in row if i >= size})
    if unknown:
        raise invalid(f"ids {unknown[:5]} are not in {model.name}'s vocabulary ({size} tokens: ids 0 to {size - 1})",
                      "ids")
    return s.TEIDecoded.model_construct(tokenizer.decode_batch(rows, skip_special_tokens=body.skip_special_tokens))


@router.get("/info", responses=documented(s.TEIError, (*GUARDED, 400, 404)))
@answered
async def tei_info(request: Request, model: str | None = Query(None)) -> s.TEIInfo:
    state = state_of(request)
    return state.info(state.catalog.find_any(model))
