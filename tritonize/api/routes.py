"""The routes: OpenAI embeddings, Cohere/Jina rerank, text-embeddings-inference's routes, tritonize's own.

Each route names the task it serves and asks the catalog for the model; the arithmetic a route adds on top of
the served answer (sorting, top-n, Matryoshka truncation, base64) is here, the inference is Triton's.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ..errors import TritonizeError
from ..spec import TEXT_INPUT, TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT
from ..tasks import classification, embedding, question_answering, rerank, sparse_embedding, token_classification
from ..tasks.base import SAMPLE_TEXT, json_cells
from . import schemas as s
from .catalog import ServedModel
from .errors import ApiError, Kind, invalid
from .state import ApiState, json_response, state_of

openai = APIRouter(tags=["OpenAI"])
cohere = APIRouter(tags=["Cohere / Jina rerank"])
tei = APIRouter(tags=["text-embeddings-inference"])
own = APIRouter(tags=["tritonize"])
ops = APIRouter(tags=["operations"])

EMBEDDING, CLASSIFICATION, RERANK, SPARSE = embedding.TASK, classification.TASK, rerank.TASK, sparse_embedding.TASK
ENTITIES, ANSWERS = token_classification.TASK, question_answering.TASK


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
    prompts = dict(model.head.prompts)
    if name not in prompts:
        known = ", ".join(prompts) or "none"
        raise invalid(f"prompt_name {name!r} is not declared by {model.name} (declared: {known})", "prompt_name")
    return prompts[name]


def right_only(direction: str) -> None:
    if direction.lower() != "right":
        raise invalid("truncation_direction left is not served: the model's tokenizer cuts long texts on the right",
                      "truncation_direction")


async def run(state: ApiState, request: Request, model: ServedModel, inputs: dict[str, list[str]],
              outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """One inference through the model's ensemble, with its token counts where the ensemble reports them."""
    request.state.model = model.name
    extra = [o for o in (TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT) if o in state.outputs.get(model.name, ())]
    return await state.backend.infer(model, inputs, [*outputs, *extra])


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
    answer = await run(state, request, model, {TEXT_INPUT: [prompt + t for t in texts]}, [embedding.OUTPUT])
    return answer[embedding.OUTPUT], answer


# -- OpenAI ---------------------------------------------------------------------------------------------------------
@openai.post("/v1/embeddings", response_model=s.EmbeddingResponse)
async def openai_embeddings(body: s.EmbeddingRequest, request: Request) -> Response:
    state = state_of(request)
    model = state.catalog.find(EMBEDDING, body.model)
    texts = texts_of(body.input, "input", state.settings.max_client_batch_size)
    if body.dimensions is not None and body.dimensions < 1:
        raise invalid("`dimensions` must be at least 1", "dimensions", 400)
    vectors, answer = await embed(state, request, model, texts)
    vectors = matryoshka(vectors, model, body.dimensions)
    if body.encoding_format == "base64":
        rows: list = [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    else:
        rows = list(vectors)
    used = tokens(answer)
    return json_response({
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": row} for i, row in enumerate(rows)],
        "model": model.name,
        "usage": {"prompt_tokens": used, "total_tokens": used},
    })


@openai.get("/v1/models", response_model=s.ModelList)
async def openai_models(request: Request) -> Response:
    models = state_of(request).catalog.models
    return json_response({"object": "list", "data": [
        {"id": m.name, "object": "model", "created": m.created, "owned_by": "tritonize", "task": m.task.name}
        for m in models]})


# -- Cohere / Jina rerank -------------------------------------------------------------------------------------------
async def scores(state: ApiState, request: Request, model: ServedModel, query: str,
                 documents: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    answer = await run(state, request, model, {rerank.QUERY_INPUT: [query] * len(documents), TEXT_INPUT: documents},
                       [rerank.OUTPUT])
    return answer[rerank.OUTPUT].reshape(-1).astype(np.float64), answer


def ranked(values: np.ndarray, top_n: int | None) -> list[int]:
    """Indices by score, best first (ties keep the documents' order), at most top_n."""
    order = np.argsort(-values, kind="stable").tolist()
    return order[:top_n] if top_n else order


@cohere.post("/v1/rerank", response_model=s.RerankResponse)
@cohere.post("/v2/rerank", response_model=s.RerankResponse, include_in_schema=False)
async def cohere_rerank(body: s.RerankRequest, request: Request) -> Response:
    state = state_of(request)
    model = state.catalog.find(RERANK, body.model)
    if not body.query:
        raise invalid("`query` must not be empty", "query", 422)
    docs = texts_of([d if isinstance(d, str) else d.text for d in body.documents], "documents",
                    state.settings.max_client_batch_size)
    values, answer = await scores(state, request, model, body.query, docs)
    results = []
    for i in ranked(values, body.top_n):
        result: dict = {"index": i, "relevance_score": float(values[i])}
        if body.return_documents:
            result["document"] = {"text": docs[i]}
        results.append(result)
    return json_response({"id": str(uuid.uuid4()), "model": model.name, "results": results,
                          "usage": {"total_tokens": tokens(answer)},
                          "meta": {"billed_units": {"search_units": 1}, "tokens": {"input_tokens": tokens(answer)}}})


# -- text-embeddings-inference --------------------------------------------------------------------------------------
@tei.post("/embed", response_model=list[list[float]])
async def tei_embed(body: s.TEIEmbedRequest, request: Request) -> Response:
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
    return json_response(vectors)


@tei.post("/embed_sparse", response_model=list[list[s.TEISparseValue]])
async def tei_embed_sparse(body: s.TEISparseRequest, request: Request) -> Response:
    """SPLADE terms as text-embeddings-inference returns them: per text, `[{"index", "value"}]`, ascending ids."""
    state = state_of(request)
    model = state.catalog.find(SPARSE, body.model)
    right_only(body.truncation_direction)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    prompt = prompt_of(model, body.prompt_name)
    answer = await run(state, request, model, {TEXT_INPUT: [prompt + t for t in texts]},
                       [sparse_embedding.INDICES, sparse_embedding.VALUES])
    refuse_truncated(answer, body.truncate, model)
    return json_response([v.pairs() for v in sparse_embedding.vectors(answer)])


@tei.post("/rerank", response_model=list[s.TEIRank])
async def tei_rerank(body: s.TEIRerankRequest, request: Request) -> Response:
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
    return json_response([{"index": i, "score": float(values[i]), **({"text": docs[i]} if body.return_text else {})}
                          for i in ranked(values, None)])


@tei.post("/predict", response_model=list[s.TEIPrediction] | list[list[s.TEIPrediction]])
async def tei_predict(body: s.TEIPredictRequest, request: Request) -> Response:
    state = state_of(request)
    model = state.catalog.find(CLASSIFICATION, body.model)
    right_only(body.truncation_direction)
    single = isinstance(body.inputs, str)
    raw: list = [body.inputs] if single else list(body.inputs)
    if any(isinstance(x, list) and len(x) != 1 for x in raw):
        raise invalid(f"{model.name} classifies one text per input; pairs are not served", "inputs")
    texts = texts_of([x[0] if isinstance(x, list) else x for x in raw], "inputs", state.settings.max_client_batch_size)
    name = classification.LOGITS if body.raw_scores else classification.PROBABILITIES
    answer = await run(state, request, model, {TEXT_INPUT: texts}, [name])
    refuse_truncated(answer, body.truncate, model)
    labels = model.head.labels
    rows = [[{"score": float(row[j]), "label": labels[j]} for j in np.argsort(-row, kind="stable")]
            for row in answer[name].astype(np.float64)]
    return json_response(rows[0] if single else rows)


@tei.post("/tokenize", response_model=list[list[s.TEIToken]])
async def tei_tokenize(body: s.TEITokenizeRequest, request: Request) -> Response:
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
            {"id": i, "text": tok, "special": True, "start": None, "stop": None} if special else
            {"id": i, "text": text[a:b], "special": False, "start": a, "stop": b}
            for i, tok, special, (a, b) in zip(enc.ids, enc.tokens, enc.special_tokens_mask, enc.offsets)])
    return json_response(out)


@tei.get("/info")
async def tei_info(request: Request, model: str | None = Query(None)) -> Response:
    state = state_of(request)
    served = state.catalog.find_any(model)
    return json_response(state.info(served))


# -- tritonize's own ------------------------------------------------------------------------------------------------
@own.post("/v1/entities", response_model=s.EntitiesResponse)
async def entities(body: s.EntitiesRequest, request: Request) -> Response:
    state = state_of(request)
    model = state.catalog.find(ENTITIES, body.model)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    answer = await run(state, request, model, {TEXT_INPUT: texts}, [token_classification.OUTPUT])
    found = json_cells(answer[token_classification.OUTPUT])
    return json_response({"model": model.name, "data": [{"index": i, "entities": e} for i, e in enumerate(found)]})


@own.post("/v1/answers", response_model=s.AnswersResponse)
async def answers(body: s.AnswersRequest, request: Request) -> Response:
    state = state_of(request)
    model = state.catalog.find(ANSWERS, body.model)
    pairs = [body.inputs] if isinstance(body.inputs, s.QAPair) else list(body.inputs)
    questions = texts_of([p.question for p in pairs], "question", state.settings.max_client_batch_size)
    contexts = texts_of([p.context for p in pairs], "context", state.settings.max_client_batch_size)
    answer = await run(state, request, model, {question_answering.QUESTION_INPUT: questions,
                                               question_answering.CONTEXT_INPUT: contexts}, [question_answering.OUTPUT])
    found = json_cells(answer[question_answering.OUTPUT])
    return json_response({"model": model.name, "data": [{"index": i, "answer": a} for i, a in enumerate(found)]})


# -- operations -----------------------------------------------------------------------------------------------------
@ops.get("/health")
async def health(request: Request) -> Response:
    """A real inference through every served ensemble, as text-embeddings-inference's /health runs one."""
    state = state_of(request)
    start = time.perf_counter()
    for model in state.catalog.models:
        row = model.task.row_for(SAMPLE_TEXT)
        inputs = {spec.name: [text] for spec, text in zip(model.task.text_inputs, row)}
        try:
            await state.backend.infer(model, inputs, list(model.task.output_names))
        except ApiError as exc:
            raise ApiError(503, Kind.UNHEALTHY, f"{model.name} does not answer: {exc.message}") from None
    return json_response({"status": "ok", "models": [m.name for m in state.catalog.models],
                          "latency_ms": round((time.perf_counter() - start) * 1e3, 2)})


@ops.get("/metrics", include_in_schema=True)
async def metrics(request: Request) -> Response:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    return Response(generate_latest(state_of(request).registry), media_type=CONTENT_TYPE_LATEST)


ROUTERS = (openai, cohere, tei, own, ops)
# Routes whose errors use text-embeddings-inference's envelope; every other route uses OpenAI's.
TEI_PATHS = frozenset(route.path for route in (*tei.routes, *ops.routes))
