"""The embedding task's routes: OpenAI's /v1/embeddings, Cohere's /v2/embed, text-embeddings-inference's /embed
and /similarity; the Matryoshka cuts and quantization on top of the served vectors; and its row of the route
table (tritonize/api/task_routes.py)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Sequence

import numpy as np
from fastapi import Request

from ...api import schemas as s
from ...api.catalog import ServedModel
from ...api.errors import ApiError, invalid
from ...api.routes.families import COHERE_EMBED, OPENAI, TEI, Router
from ...api.routes.inference import refuse_truncated, run, tokens
from ...api.routes.parameters import cut_at_start, direction_of, input_prompt, prompt_of, texts_of
from ...api.routes.responses import INFERS, answered, documented
from ...api.state import ApiState, state_of
from ...api.task_routes import TaskRoutes, prompt_names
from ...errors import TritonizeError
from ...spec import TOKEN_COUNT_OUTPUT
from .chunking import Windows
from .quantization import RANGED, quantize
from . import bodies as b
from .contract import INPUT_TYPE_PROMPTS, CONTRACT, Head

openai, cohere, tei = Router(OPENAI), Router(COHERE_EMBED), Router(TEI)
ROUTERS = (openai, cohere, tei)


def accepts(heads: tuple[Head, ...]) -> dict[str, dict]:
    """The sizes every served embedder cuts to (its own, and the Matryoshka sizes it declares), the prompt
    names all declare, the input types all map to a prompt (or embed as they are), and `normalize: false` only
    where no graph normalises."""
    sizes = set.intersection(*({h.dim, *h.dimensions} for h in heads))
    dimensions = {"anyOf": [{"type": "integer", "enum": sorted(sizes, reverse=True)}, {"type": "null"}],
                  "description": "the served size, or a Matryoshka size the model declares"}
    input_types = [t for t in INPUT_TYPE_PROMPTS if all(t in h.input_types for h in heads)]
    return {
        "dimensions": dimensions,
        "output_dimension": dimensions,
        "input_type": {"anyOf": [{"type": "string", "enum": input_types}, {"type": "null"}],
                       "description": "selects the prompt the model declares for it (docs/api.md); a model "
                                      "without prompts embeds the text as it is"},
        "normalize": {"type": "boolean", **({"enum": [True]} if any(h.normalize for h in heads) else {}),
                      "description": "false only for a model whose graph does not normalise"},
        **prompt_names(heads),
    }


ROUTES = TaskRoutes(CONTRACT, ("/v1/embeddings", "/v2/embed", "/embed", "/similarity", "/embed_all"),
                    lambda a, name, text: {"model": name, "input": [text]},
                    lambda head: {"embedding": {"pooling": head.pooling}}, accepts)


async def embed(state: ApiState, request: Request, model: ServedModel, texts: list[str], prompt: str = "",
                parameters: dict | None = None,
                windows: Windows | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The texts' vectors and the ensemble's answer (its token counts); `parameters`: how the tokenizer step cuts
    them; `windows`: each text embedded as its windows, pooled (tasks/embedding/chunking.py)."""
    texts = [prompt + t for t in texts]
    rows = windows.rows(texts) if windows else [(t,) for t in texts]
    parameters = windows.parameters() if windows else parameters
    answer = await run(state, request, model, rows, parameters)
    vectors = CONTRACT.vectors(answer)

    async def shadow_vectors(ensemble: str) -> np.ndarray:
        return CONTRACT.vectors(await state.backend.infer(model, CONTRACT.request(rows), list(CONTRACT.output_names),
                                                         ensemble, parameters))

    state.rollouts.mirror(model.name, vectors, shadow_vectors)
    if windows is None:
        return vectors, answer
    if TOKEN_COUNT_OUTPUT not in answer:
        raise ApiError(503, f"{model.name}'s ensemble did not report its token counts, which pool a text's windows")
    return windows.pool(vectors, answer[TOKEN_COUNT_OUTPUT].reshape(-1), model.head.normalize), windows.answer(answer)


async def windows_of(state: ApiState, model: ServedModel, texts: list[str], prompt: str,
                     asked: bool | None) -> Windows | None:
    """Each text's windows where chunked processing is on (the request's `enable_chunked_processing`, else the
    server's default); None where it is off."""
    if not (state.settings.chunked_processing if asked is None else asked):
        return None
    refusal = model.cut_refusal
    if refusal:
        raise invalid(f"chunked processing is not served for {model.name}: {refusal}", "enable_chunked_processing",
                      400)
    overlap = state.settings.chunk_overlap
    tokenizer = state.tokenizer(model, overlap)
    room = model.max_length - tokenizer.num_special_tokens_to_add(False)
    if overlap >= room:
        raise invalid(f"chunked processing is not served for {model.name}: the server's chunk overlap of {overlap} "
                      f"tokens is not under the {room} tokens of text a window holds (--chunk-overlap)",
                      "enable_chunked_processing", 400)
    return await asyncio.to_thread(Windows.of, tokenizer, [prompt + t for t in texts], overlap)


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


def base64_floats(vectors: np.ndarray) -> list[str]:
    return [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]


@openai.post("/v1/embeddings", responses={**documented(s.OpenAIError, INFERS), **RANGES_DOCUMENTED})
@answered
async def openai_embeddings(body: b.EmbeddingRequest, request: Request) -> b.EmbeddingResponse:
    """float32 vectors, their bytes in base64, or an int8, uint8, binary or ubinary embedding's bytes in base64;
    `input_type` (NVIDIA NIM's query | passage) selects the prompt the model declares for it."""
    state = state_of(request)
    model = state.catalog.find(CONTRACT, body.model)
    texts = texts_of(body.input, "input", state.settings.max_client_batch_size)
    if body.dimensions is not None and body.dimensions < 1:
        raise invalid("`dimensions` must be at least 1", "dimensions", 400)
    prompt = input_prompt(model, body.input_type)
    windows = await windows_of(state, model, texts, prompt, chunking(body.enable_chunked_processing, body.truncate))
    parameters = cut_at_start(model, "truncate", "START") if body.truncate == "START" else None
    vectors, answer = await embed(state, request, model, texts, prompt, parameters, windows)
    refuse_truncated(answer, False if body.truncate == "NONE" else None, model, 400, "NONE")
    vectors = matryoshka(vectors, model, body.dimensions)
    if body.encoding_format == "float":
        rows: Sequence = vectors
    elif body.encoding_format == "base64":
        rows = base64_floats(vectors)
    else:
        rows = [base64.b64encode(v.tobytes()).decode("ascii")
                for v in quantized(request, model, vectors, body.encoding_format, "encoding_format")]
    used = tokens(answer)
    usage = b.EmbeddingUsage.model_construct(prompt_tokens=used, total_tokens=used,
                                             **({"chunks": windows.total} if windows else {}))
    return b.EmbeddingResponse.model_construct(
        data=[b.Embedding(object="embedding", index=i, embedding=row) for i, row in enumerate(rows)],
        model=model.name, usage=usage)


def chunking(asked: bool | None, truncate: str | None) -> bool | None:
    """The request's chunked processing switch; asked together with cutting at the start, refused."""
    if asked and truncate == "START":
        raise invalid("truncate START and enable_chunked_processing ask two things of a long text: send one",
                      "truncate", 400)
    return False if truncate == "START" else asked


EMBED_PATH = "/v2/embed"
API_VERSION = "2"


@cohere.post(EMBED_PATH, responses={**documented(s.CohereError, INFERS), **RANGES_DOCUMENTED})
@answered
async def cohere_embed(body: b.CohereEmbedRequest, request: Request) -> b.CohereEmbedResponse:
    """Each embedding type asked for, from one inference: float, base64 (the float32 bytes), and int8, uint8,
    binary, ubinary as sentence-transformers' quantize_embeddings computes them."""
    state = state_of(request)
    model = state.catalog.find(CONTRACT, body.model)
    if body.images or body.inputs:
        raise invalid(f"{model.name} embeds texts only: send `texts`", "images" if body.images else "inputs", 400)
    if body.max_tokens is not None and body.max_tokens < model.max_length:
        raise invalid(f"max_tokens {body.max_tokens} is not served: {model.name} reads the first {model.max_length} "
                      "tokens of each text (truncate NONE refuses a longer one)", "max_tokens", 400)
    if not body.embedding_types:
        raise invalid("`embedding_types` must not be empty", "embedding_types", 422)
    if body.output_dimension is not None and body.output_dimension < 1:
        raise invalid("`output_dimension` must be at least 1", "output_dimension", 400)
    texts = texts_of(body.texts, "texts", state.settings.max_client_batch_size)
    prompt = input_prompt(model, body.input_type)
    windows = await windows_of(state, model, texts, prompt, chunking(body.enable_chunked_processing, body.truncate))
    parameters = cut_at_start(model, "truncate", "START") if body.truncate == "START" else None
    vectors, answer = await embed(state, request, model, texts, prompt, parameters, windows)
    refuse_truncated(answer, False if body.truncate == "NONE" else None, model)
    vectors = matryoshka(vectors, model, body.output_dimension, "output_dimension")
    embeddings: dict = {}
    for kind in dict.fromkeys(body.embedding_types):
        if kind == "float":
            embeddings[kind] = vectors
        elif kind == "base64":
            embeddings[kind] = base64_floats(vectors)
        else:
            embeddings[kind] = quantized(request, model, vectors, kind, "embedding_types")
    billed = b.CohereBilledUnits.model_construct(input_tokens=tokens(answer))
    return b.CohereEmbedResponse.model_construct(
        id=str(uuid.uuid4()), embeddings=embeddings, texts=texts,
        meta=b.CohereMeta.model_construct(api_version=b.CohereApiVersion.model_construct(version=API_VERSION),
                                          billed_units=billed, **({"chunks": windows.total} if windows else {})))


@tei.post("/embed", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed(body: b.TEIEmbedRequest, request: Request) -> b.TEIEmbeddings:
    state = state_of(request)
    model = state.catalog.find(CONTRACT, body.model)
    parameters = direction_of(model, body.truncation_direction)
    texts = texts_of(body.inputs, "inputs", state.settings.max_client_batch_size)
    if not body.normalize and model.head.normalize:
        raise invalid(f"normalize false is not served: {model.name} normalises inside its graph (its Normalize "
                      "module), so only unit vectors exist to return", "normalize")
    vectors, answer = await embed(state, request, model, texts, prompt_of(model, body.prompt_name), parameters)
    refuse_truncated(answer, body.truncate, model)
    vectors = matryoshka(vectors, model, body.dimensions)
    if body.normalize and not model.head.normalize:
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    return b.TEIEmbeddings.model_construct(vectors)


@tei.post("/similarity", responses=documented(s.TEIError, INFERS))
@answered
async def tei_similarity(body: b.TEISimilarityRequest, request: Request) -> b.TEISimilarities:
    """As text-embeddings-inference computes it: the source sentence and the sentences embedded together, then
    the cosine of each sentence's vector with the source's (a cosine, so the graph's normalisation changes
    nothing)."""
    state = state_of(request)
    model = state.catalog.find(CONTRACT, body.model)
    parameters = body.parameters or b.TEISimilarityParameters()
    cut = direction_of(model, parameters.truncation_direction, "parameters.truncation_direction")
    sentences = texts_of(body.inputs.sentences, "inputs.sentences", state.settings.max_client_batch_size)
    source = texts_of(body.inputs.source_sentence, "inputs.source_sentence", 1)
    vectors, answer = await embed(state, request, model, source + sentences, prompt_of(model, parameters.prompt_name),
                                  cut)
    refuse_truncated(answer, parameters.truncate, model)
    return b.TEISimilarities.model_construct(cosines(vectors[0], vectors[1:]).tolist())


def cosines(source: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The cosine of each row of `others` with `source`, in float64 (0 for a zero vector)."""
    source, others = source.astype(np.float64), others.astype(np.float64)
    norms = np.linalg.norm(others, axis=1) * np.linalg.norm(source)
    return np.divide(others @ source, norms, out=np.zeros(len(others)), where=norms > 0)
