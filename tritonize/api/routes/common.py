"""What the routes share: the statuses they document, the fast response path, reading texts and prompts, one
inference through a model's ensemble, and the arithmetic on answers several families return (Matryoshka cuts,
quantization, ranking)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import Response

from ...errors import TritonizeError
from ...spec import TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT
from ...tasks.answers import Answers
from ...tasks.classification import answers as classification
from ...tasks.embedding import answers as embedding
from ...tasks.embedding.quantization import RANGED, quantize
from ...tasks.multi_vector import answers as multi_vector
from ...tasks.question_answering import answers as question_answering
from ...tasks.rerank import answers as rerank
from ...tasks.sparse_embedding import answers as sparse_embedding
from ...tasks.token_classification import answers as token_classification
from .. import schemas as s
from ..catalog import ServedModel
from ..errors import STATUSES, ApiError, invalid
from ..rollouts import CALLER_FAULTS, CALLER_HEADER
from ..state import ApiState, json_response

EMBEDDING, CLASSIFICATION, RERANK = embedding.ANSWERS, classification.ANSWERS, rerank.ANSWERS
MULTI_VECTOR = multi_vector.ANSWERS
SPARSE, ENTITIES, ANSWERS = sparse_embedding.ANSWERS, token_classification.ANSWERS, question_answering.ANSWERS

# What any route may answer before its handler runs (the guard, the router), and what a route that infers adds.
GUARDED = (401, 405, 413, 429)
INFERS = (*GUARDED, 400, 404, 422, 424, 503)


def documented(envelope: type[s.Body], statuses: Sequence[int]) -> dict[int | str, dict[str, Any]]:
    """The `responses` of a route: each status it may answer, in the envelope its family's clients parse."""
    return {status: {"model": envelope, "description": STATUSES[status].meaning} for status in sorted(statuses)}


def answered(handler: Callable[..., Awaitable[s.BaseModel]]) -> Callable[..., Awaitable[Response]]:
    """The handler's response model, written by orjson (state.json_response), with the headers the handler
    set on `request.state.response_headers`; FastAPI documents the model from the handler's annotation and,
    given a Response, validates nothing again."""

    @functools.wraps(handler)
    async def endpoint(*args: Any, **kwargs: Any) -> Response:
        body = await handler(*args, **kwargs)
        request = kwargs.get("request")
        return json_response(body, headers=getattr(request.state, "response_headers", None) if request else None)

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


def input_prompt(model: ServedModel, input_type: str | None) -> str:
    """The prompt an `input_type` selects (embedding.INPUT_TYPE_PROMPTS); none asked: the text as it is."""
    if input_type is None:
        return ""
    try:
        return model.head.prompt_for(input_type)
    except TritonizeError as exc:
        raise invalid(f"{model.name}: {exc}", "input_type", 400) from None


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
    inputs, outputs = answers.request(rows), [*answers.output_names, *extra]
    target = state.rollouts.target(model.name, request.headers.get(CALLER_HEADER))
    if target.candidate:  # a canary: a failure that is not the request's own is answered by the served version
        start = time.perf_counter()
        try:
            answer = await state.backend.infer(model, inputs, outputs, target.name)
        except ApiError as exc:
            if exc.status in CALLER_FAULTS:
                raise
            state.rollouts.record(model.name, target, False, time.perf_counter() - start)
            target = state.rollouts.served_target(model.name)
        else:
            state.rollouts.record(model.name, target, True, time.perf_counter() - start)
            request.state.version = str(target.version)
            return answer
    request.state.version = str(target.version)
    start = time.perf_counter()
    answer = await state.backend.infer(model, inputs, outputs)
    state.rollouts.record(model.name, target, True, time.perf_counter() - start)
    return answer


def tokens(answer: dict[str, np.ndarray]) -> int:
    counts = answer.get(TOKEN_COUNT_OUTPUT)
    return int(counts.sum()) if counts is not None else 0


def refuse_truncated(answer: dict[str, np.ndarray], truncate: bool | None, model: ServedModel,
                     status: int = 413, asked: str = "false") -> None:
    """`truncate: false` (text-embeddings-inference's strict mode; NIM's NONE, `asked`): a text the model could
    not read whole is refused."""
    cut = answer.get(TRUNCATED_OUTPUT)
    if truncate is False and cut is not None and cut.any():
        rows = np.flatnonzero(cut.reshape(-1)).tolist()
        raise invalid(f"inputs {rows[:5]} are longer than {model.name} reads ({model.max_length} tokens) and "
                      f"truncate is {asked}", "truncate", status)


def logits_only(model: ServedModel, param: str) -> None:
    """A reranker's raw scores exist only where its graph applies no activation: a sigmoid inverted in float32
    is not the model's logit (it saturates to 1 well before the logit is large). A head without an activation
    (MaxSim) scores raw."""
    activation = getattr(model.head, "activation", "identity")
    if activation != "identity":
        raise invalid(f"{param} is not served for {model.name}: its graph applies the CrossEncoder's "
                      f"{activation}, and inverting it would not give the model's logits exactly", param)


def matryoshka(vectors: np.ndarray, model: ServedModel, dimensions: int | None,
               param: str = "dimensions") -> np.ndarray:
    """The served vectors at a declared Matryoshka size (the model's own rule: embedding.Head.truncate)."""
    if dimensions is None or dimensions == vectors.shape[1]:
        return vectors
    try:
        return np.ascontiguousarray(model.head.truncate(vectors, dimensions), dtype=np.float32)
    except TritonizeError as exc:
        raise invalid(f"{model.name}: {exc.message}", param, 400) from None


# Which recorded ranges quantized a response's int8/uint8 embeddings (quantization.Calibration.label).
RANGES_HEADER = "Quantization-Ranges"
RANGES_DOCUMENTED = {200: {"headers": {RANGES_HEADER: {
    "description": "with int8 or uint8 embeddings: the ranges they were quantized with (size, calibration texts, "
                   "their count, and the ranges' sha256)", "schema": {"type": "string"}}}}}


def quantized(request: Request, model: ServedModel, vectors: np.ndarray, precision: str, param: str) -> np.ndarray:
    """The vectors at `precision`, as sentence-transformers' quantize_embeddings computes them; int8 and uint8
    with the ranges recorded for their size, named in the response's RANGES_HEADER."""
    if precision not in RANGED:
        return quantize(vectors, precision)
    calibration = model.calibration
    dim = vectors.shape[1]
    if calibration is None or dim not in calibration.ranges:
        raise invalid(f"{precision} embeddings are not served for {model.name}: its repository records no "
                      f"quantization ranges for {dim} values (regenerate it with this tritonize)", param, 400)
    request.state.response_headers = {RANGES_HEADER: calibration.label(dim).encode("ascii", "backslashreplace")
                                      .decode("ascii")}
    return quantize(vectors, precision, calibration.of_size(dim))


async def embed(state: ApiState, request: Request, model: ServedModel, texts: list[str],
                prompt: str = "") -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rows = [(prompt + t,) for t in texts]
    answer = await run(state, request, model, rows)
    vectors = EMBEDDING.vectors(answer)

    async def shadow_vectors(ensemble: str) -> np.ndarray:
        return EMBEDDING.vectors(await state.backend.infer(model, EMBEDDING.request(rows),
                                                           list(EMBEDDING.output_names), ensemble))

    state.rollouts.mirror(model.name, vectors, shadow_vectors)
    return vectors, answer


async def pair_scores(state: ApiState, request: Request, model: ServedModel,
                      pairs: list[tuple[str, str]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A reranker's score of each (query, text) pair, in order, and the answer it came in."""
    answer = await run(state, request, model, pairs)
    return RERANK.scores(answer), answer


async def multi_vectors(state: ApiState, request: Request, model: ServedModel, texts: list[str],
                        form: str) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """A late-interaction model's vectors of each text in one form (query or document), and the answer."""
    answer = await run(state, request, model, [(t, form) for t in texts])
    return multi_vector.vectors(answer), answer


async def maxsim_pairs(state: ApiState, request: Request, model: ServedModel,
                       pairs: list[tuple[str, str]]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A late-interaction model's MaxSim of each (query, text) pair, in order: each distinct query encoded once
    as a query and each distinct text once as a document, both requests in flight together, and MaxSim here
    (the head's arithmetic, the library's `similarity`). The answer holds the documents' rows (their truncation
    flags, by index) and every token read."""
    queries, documents = list(dict.fromkeys(q for q, _ in pairs)), list(dict.fromkeys(d for _, d in pairs))
    (query_vectors, asked), (document_vectors, answer) = await asyncio.gather(
        multi_vectors(state, request, model, queries, multi_vector.QUERY),
        multi_vectors(state, request, model, documents, multi_vector.DOCUMENT))
    by_query = dict(zip(queries, query_vectors))
    by_document = dict(zip(documents, document_vectors))
    values = np.array([model.head.maxsim(by_query[q], [by_document[d]])[0] for q, d in pairs], dtype=np.float32)
    if TRUNCATED_OUTPUT in answer:  # by pair, as a reranker's answer holds them
        cut = dict(zip(documents, answer[TRUNCATED_OUTPUT].reshape(-1)))
        answer = {**answer, TRUNCATED_OUTPUT: np.array([[cut[d]] for _, d in pairs])}
    if TOKEN_COUNT_OUTPUT in answer and TOKEN_COUNT_OUTPUT in asked:
        answer = {**answer, TOKEN_COUNT_OUTPUT: np.concatenate([asked[TOKEN_COUNT_OUTPUT], answer[TOKEN_COUNT_OUTPUT]])}
    return values, answer


# How each kind of model that ranks texts for a query scores a list of (query, text) pairs: a reranker reads each
# pair in one pass (the rerank task); a late-interaction model scores the two texts' vectors by MaxSim.
PairScorer = Callable[[ApiState, Request, ServedModel, list[tuple[str, str]]],
                      Awaitable[tuple[np.ndarray, dict[str, np.ndarray]]]]
SCORERS: dict[Answers, PairScorer] = {RERANK: pair_scores, MULTI_VECTOR: maxsim_pairs}
RANKING = tuple(SCORERS)  # what the rerank, ranking and score routes serve


async def scores(state: ApiState, request: Request, model: ServedModel, query: str,
                 documents: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The model's score of each document for the query, in the documents' order."""
    return await SCORERS[model.answers](state, request, model, [(query, d) for d in documents])


def ranked(values: np.ndarray, top_n: int | None) -> list[int]:
    """Indices by score, best first (ties keep the documents' order), at most top_n."""
    order = np.argsort(-values, kind="stable").tolist()
    return order[:top_n] if top_n else order
