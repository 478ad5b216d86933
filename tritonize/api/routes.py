"""The routes: OpenAI embeddings, Cohere/Jina rerank, text-embeddings-inference's routes, tritonize's own.

Each route names the task it serves (task_routes.py) and asks the catalog for the model; the task's answers
decode what Triton returned, and the arithmetic a route adds on top of them (sorting, top-n, Matryoshka
truncation, base64) is here. A handler returns its response model (schemas.py), and `answered` writes it on
the fast path, so the OpenAPI document is what the handlers return. Every status a route can answer is
declared with it, from errors.STATUSES.
"""

from __future__ import annotations

import base64
import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import TritonizeError
from ..spec import TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT
from ..tasks.answers import SAMPLE_TEXT, Answers
from ..tasks.classification import answers as classification
from ..tasks.embedding import answers as embedding
from ..tasks.question_answering import answers as question_answering
from ..tasks.rerank import answers as rerank
from ..tasks.sparse_embedding import answers as sparse_embedding
from ..tasks.token_classification import answers as token_classification
from . import schemas as s
from .catalog import ServedModel
from .errors import STATUSES, ApiError, invalid
from .state import ApiState, json_response, state_of

openai = APIRouter(tags=["OpenAI"])
cohere = APIRouter(tags=["Cohere / Jina rerank"])
tei = APIRouter(tags=["text-embeddings-inference"])
own = APIRouter(tags=["tritonize"])
ops = APIRouter(tags=["operations"])

EMBEDDING, CLASSIFICATION, RERANK = embedding.ANSWERS, classification.ANSWERS, rerank.ANSWERS
SPARSE, ENTITIES, ANSWERS = sparse_embedding.ANSWERS, token_classification.ANSWERS, question_answering.ANSWERS

# What any route may answer before its handler runs (the guard, the router), and what a route that infers adds.
GUARDED = (401, 405, 413, 429)
INFERS = (*GUARDED, 400, 404, 422, 424, 503)


def documented(envelope: type[s.Body], statuses: Sequence[int]) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route: each status it may answer, in the envelope its family's clients parse."""
    return {status: {"model": envelope, "description": STATUSES[status].meaning} for status in sorted(statuses)}


def answered(handler: Callable[..., Awaitable[s.BaseModel]]) -> Callable[..., Awaitable[Response]]:
    """The handler's response model, written by orjson (state.json_response); FastAPI documents the model from
    the handler's annotation and, given a Response, validates nothing again."""

    @functools.wraps(handler)
    async def endpoint(*args: Any, **kwargs: Any) -> Response:
        return json_response(await handler(*args, **kwargs))

    return endpoint


# -- shared steps ---------------------------------------------------------------------------------------------------
def texts_of(value: Any, param: str, limit: int) -> list[str]:
    """A string or a list of strings; token ids, empty strings and lists over the bound are refused."""
    items = [value] if isinstance(value, str) else list(value)
    if not items:
        raise invalid(f"`{param}` must not be empty", param, 422)
    if any(not isinstance(x, str) for x in items):
        raise invalid(f"`{param}` holds token ids: send text, the server tokenizes it with the model's own "
                      "tokenizer", param, 422)
    if any(not x for x in items):
        raise invalid(f"`{param}` holds an empty string", param, 422)
    if len(items) > limit:
        raise invalid(f"`{param}` holds {len(items)} texts, over this server's limit of {limit} per request "
                      "(--max-client-batch-size)", param, 413)
    return items


def prompt_of(model: ServedModel, name: str | None) -> str:
    """The text a folder declares for a prompt name (sentence-transformers' `prompts`)."""
    if not name:
        return ""
    prompts = model.prompts
    if name not in prompts:
        known = ", ".join(prompts) or "none"
        raise invalid(f"prompt_name {name!r} is not declared by {model.name} (declared: {known})", "prompt_name")
    return prompts[name]


def right_only(direction: str) -> None:
    if direction.lower() != "right":
        raise invalid("truncation_direction left is not served: the model's tokenizer cuts long texts on the right",
                      "truncation_direction")


async def run(state: ApiState, request: Request, model: ServedModel,
              rows: Sequence[tuple[str, ...]]) -> dict[str, np.ndarray]:
    """One inference of these rows through the model's ensemble: its answers' outputs, with its token counts
    where the ensemble reports them."""
    request.state.model = model.name
    answers: Answers = model.answers
    extra = [o for o in (TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT) if o in state.outputs.get(model.name, ())]
    return await state.backend.infer(model, answers.request(rows), [*answers.output_names, *extra])


def tokens(answer: dict[str, np.ndarray]) -> int:
    counts = answer.get(TOKEN_COUNT_OUTPUT)
    return int(counts.sum()) if counts is not None else 0


def refuse_truncated(answer: dict[str, np.ndarray], truncate: bool | None, model: ServedModel) -> None:
    """`truncate: false` (text-embeddings-inference's strict mode): a text the model could not read whole is refused."""
    cut = answer.get(TRUNCATED_OUTPUT)
    if truncate is False and cut is not None and cut.any():
        rows = np.flatnonzero(cut.reshape(-1)).tolist()
        raise invalid(f"inputs {rows[:5]} are longer than {model.name} reads ({model.max_length} tokens) and "
                      "truncate is false", "truncate", 413)


def matryoshka(vectors: np.ndarray, model: ServedModel, dimensions: int | None) -> np.ndarray:
    """The served vectors at a declared Matryoshka size (the model's own rule: embedding.Head.truncate)."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    try:
        return np.ascontiguousarray(model.head.truncate(vectors, dimensions), dtype=np.float32)
    except TritonizeError as exc:
        raise invalid(f"{model.name}: {exc.message}", "dimensions", 400) from None


async def embed(state: ApiState, request: Request, model: ServedModel, texts: list[str],
                prompt: str = "") -> tuple[np.ndarray, dict[str, np.ndarray]]:
    answer = await run(state, request, model, [(prompt + t,) for t in texts])
    return EMBEDDING.vectors(answer), answer


# -- OpenAI ---------------------------------------------------------------------------------------------------------
@openai.post("/v1/embeddings", responses=documented(s.OpenAIError, INFERS))
@answered
async def openai_embeddings(body: s.EmbeddingRequest, request: Request) -> s.EmbeddingResponse:
    state = state_of(request)
    model = state.catalog.find(EMBEDDING, body.model)
    texts = texts_of(body.input, "input", state.settings.max_client_batch_size)
    if body.dimensions is not None and body.dimensions < 1:
        raise invalid("`dimensions` must be at least 1", "dimensions", 400)
    vectors, answer = await embed(state, request, model, texts)
    vectors = matryoshka(vectors, model, body.dimensions)
    if body.encoding_format == "base64":
        rows: Sequence = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    else:
        rows = vectors
    used = tokens(answer)
    return s.EmbeddingResponse.model_construct(
        data=[s.Embedding(object="embedding", index=i, embedding=row) for i, row in enumerate(rows)],
        model=model.name, usage=s.Usage.model_construct(prompt_tokens=used, total_tokens=used))


@openai.get("/v1/models", responses=documented(s.OpenAIError, GUARDED))
@answered
async def openai_models(request: Request) -> s.ModelList:
    return s.ModelList.model_construct(data=[
        s.ModelCard.model_construct(id=m.name, created=m.created, task=m.answers.name)
        for m in state_of(request).catalog.models])


# -- Cohere / Jina rerank -------------------------------------------------------------------------------------------
async def scores(state: ApiState, request: Request, model: ServedModel, query: str,
                 documents: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    answer = await run(state, request, model, [(query, d) for d in documents])
    return RERANK.scores(answer), answer


def ranked(values: np.ndarray, top_n: int | None) -> list[int]:
    """Indices by score, best first (ties keep the documents' order), at most top_n."""
    order = np.argsort(-values, kind="stable").tolist()
    return order[:top_n] if top_n else order


@cohere.post("/v1/rerank", responses=documented(s.OpenAIError, INFERS))
@cohere.post("/v2/rerank", responses=documented(s.OpenAIError, INFERS), include_in_schema=False)
@answered
async def cohere_rerank(body: s.RerankRequest, request: Request) -> s.RerankResponse:
    state = state_of(request)
    model = state.catalog.find(RERANK, body.model)
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


# -- text-embeddings-inference --------------------------------------------------------------------------------------
@tei.post("/embed", responses=documented(s.TEIError, INFERS))
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


@tei.post("/embed_sparse", responses=documented(s.TEIError, INFERS))
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


@tei.post("/rerank", responses=documented(s.TEIError, INFERS))
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


@tei.post("/predict", responses=documented(s.TEIError, INFERS))
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


@tei.post("/tokenize", responses=documented(s.TEIError, (*GUARDED, 400, 404, 422)))
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


@tei.get("/info", responses=documented(s.TEIError, (*GUARDED, 400, 404)))
@answered
async def tei_info(request: Request, model: str | None = Query(None)) -> s.TEIInfo:
    state = state_of(request)
    return state.info(state.catalog.find_any(model))


# -- tritonize's own ------------------------------------------------------------------------------------------------
@own.post("/v1/entities", responses=documented(s.OpenAIError, INFERS))
@answered
async def entities(body: s.EntitiesRequest, request: Request) -> s.EntitiesResponse:
    state = state_of(request)
    model = state.catalog.find(ENTITIES, body.model)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    found = ENTITIES.entities(await run(state, request, model, [(t,) for t in texts]))
    return s.EntitiesResponse.model_construct(model=model.name, data=[
        s.EntitiesResult.model_construct(index=i, entities=e) for i, e in enumerate(found)])


@own.post("/v1/answers", responses=documented(s.OpenAIError, INFERS))
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


# -- operations -----------------------------------------------------------------------------------------------------
@ops.get("/health", responses=documented(s.TEIError, (405, 413, 429, 503)))
@answered
async def health(request: Request) -> s.Health:
    """A real inference through every served ensemble, as text-embeddings-inference's /health runs one."""
    state = state_of(request)
    start = time.perf_counter()
    for model in state.catalog.models:
        answers: Answers = model.answers
        try:
            await state.backend.infer(model, answers.request([answers.row_for(SAMPLE_TEXT)]),
                                      list(answers.output_names))
        except ApiError as exc:
            raise ApiError(503, f"{model.name} does not answer: {exc.message}") from None
    return s.Health.model_construct(models=[m.name for m in state.catalog.models],
                                    latency_ms=round((time.perf_counter() - start) * 1e3, 2))


class MetricsResponse(Response):
    media_type = CONTENT_TYPE_LATEST


@ops.get("/metrics", response_class=MetricsResponse, responses={
    200: {"description": "Prometheus' text exposition format",
          "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
    **documented(s.TEIError, GUARDED)})
async def metrics(request: Request) -> Response:
    return MetricsResponse(generate_latest(state_of(request).registry))


ROUTERS = (openai, cohere, tei, own, ops)
# Routes whose errors use text-embeddings-inference's envelope; every other route uses OpenAI's.
TEI_PATHS = frozenset(route.path for route in (*tei.routes, *ops.routes))
