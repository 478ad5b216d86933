"""The embedding task's routes: OpenAI's /v1/embeddings, Cohere's /v2/embed, text-embeddings-inference's /embed
and /similarity; the Matryoshka cuts and quantization on top of the served vectors; and its row of the route
table (tritonize/api/task_routes.py)."""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Union

import numpy as np
from fastapi import Request
from pydantic import TypeAdapter

from ...api import schemas as s
from ...api.catalog import ServedModel
from ...api.errors import ApiError, invalid
from ...api.remote_images import RemoteImage
from ...api.route_call import RouteCall
from ...api.routes import inference
from ...api.routes.families import COHERE_EMBED, OPENAI, TEI, Router
from ...api.routes.inference import refuse_truncated, tokens
from ...api.routes.parameters import cut_at_start, direction_of, image_of, input_prompt, prompt_of, texts_of
from ...api.routes.responses import INFERS, answered, documented
from ...api.schemas import TextList, Texts
from ...api.state import ApiState, noted
from ...api.task_routes import TaskRoutes, prompt_names
from ...errors import TritonizeError
from ...spec import QUANTIZATION_FILE, TOKEN_COUNT_OUTPUT
from ..contract import TaskContract
from .chunking import Windows
from .quantization import RANGED, Calibration, quantize
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
        **TEXTS_ONLY,
    }


# Where only text embedders are served (an image model's row names none of these, so the document keeps them
# where one is served beside them): texts alone, as before images were served.
TEXTS_ONLY: dict[str, dict | None] = {
    "EmbeddingRequest.input": TypeAdapter(Texts).json_schema(), "EmbeddingRequest.messages": None,
    "CohereEmbedRequest.texts": TypeAdapter(TextList).json_schema(), "CohereEmbedRequest.images": None,
    "CohereEmbedRequest.inputs": None,
}


# /embed_all is the multi-vector task's: it refuses an embedder (422), whose graph pools the token states inside.
# Where no served model cuts a text at its start or into windows (ServedModel.cut_refusal): what is left of the
# fields that ask it.
UNCUT: dict[str, dict] = {
    "truncation_direction": {"type": "string", "enum": ["right", "Right"],
                             "description": "the served models read every text from its start: left is refused"},
    "EmbeddingRequest.truncate": {"anyOf": [{"type": "string", "enum": ["NONE", "END"]}, {"type": "null"}]},
    "CohereEmbedRequest.truncate": {"type": "string", "enum": ["NONE", "END"]},
    "enable_chunked_processing": {"anyOf": [{"type": "boolean", "enum": [False]}, {"type": "null"}],
                                  "description": "the served models read every text from its start: true is refused"},
}

ROUTES = TaskRoutes(CONTRACT, ("/v1/embeddings", "/v2/embed", "/embed", "/similarity"),
                    lambda a, name, text: {"model": name, "input": [text]},
                    lambda head: {"embedding": {"pooling": head.pooling}}, accepts, uncut=UNCUT)


Input = Union[str, bytes, RemoteImage]  # a text, an image file's bytes, or its URL (parameters.image_of)


async def embed(call: RouteCall, inputs: Sequence[Input], prompt: str = "", param: str = "input",
                parameters: dict | None = None,
                windows: Windows | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The vectors of a request's inputs in order: its texts (each after `prompt`) in one inference, its images
    in another, both in flight together, where the model embeds images (its task's IMAGES), those given by URL
    fetched first; the answers' other outputs (token counts) in the inputs' order too. `parameters` and `windows`
    are for texts alone."""
    model = call.model
    images = [i for i, x in enumerate(inputs) if not isinstance(x, str)]
    if not images:
        return await embed_texts(call, list(inputs), prompt, parameters, windows)  # type: ignore[arg-type]
    image_inputs = inference.image_inputs().get(model.contract)
    if image_inputs is None:
        raise invalid(f"{model.name} embeds texts only: send texts, or name a model that embeds images", param, 400)
    if parameters or windows:
        raise invalid("cutting at the start and chunked processing are for texts; this request holds images", param,
                      400)
    texts = [i for i, x in enumerate(inputs) if isinstance(x, str)]
    pictures = await call.state.images.resolved([inputs[i] for i in images])
    labels = [f"{param}[{i}]" for i in images]
    parts = [embed_images(call, image_inputs(pictures), labels)]  # type: ignore[arg-type]
    if texts:
        parts.append(embed_texts(call, [inputs[i] for i in texts], prompt))  # type: ignore[misc]
    answers = await asyncio.gather(*parts)
    answer = interleaved(len(inputs), [(images, answers[0][1]), *([(texts, answers[1][1])] if texts else [])])
    return model.contract.vectors(answer), answer


async def embed_texts(call: RouteCall, texts: list[str], prompt: str = "", parameters: dict | None = None,
                      windows: Windows | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The texts' vectors and the ensemble's answer (its token counts); `parameters`: how the tokenizer step cuts
    them; `windows`: each text embedded as its windows, pooled (tasks/embedding/chunking.py)."""
    model = call.model
    texts = [prompt + t for t in texts]
    rows = windows.rows(texts) if windows else [(t,) for t in texts]
    parameters = windows.parameters() if windows else parameters
    vectors, answer = await embed_inputs(call, model.contract.request(rows), parameters)
    if windows is None:
        return vectors, answer
    if TOKEN_COUNT_OUTPUT not in answer:
        raise ApiError(503, f"{model.name}'s ensemble did not report its token counts, which pool a text's windows")
    return windows.pool(vectors, answer[TOKEN_COUNT_OUTPUT].reshape(-1), model.head.normalize), windows.answer(answer)


async def embed_images(call: RouteCall, inputs: dict[str, list[bytes]],
                       labels: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Images through the ensemble; a refused image is named as the client sent it (`input[2]`), where the
    request went to Triton whole."""
    try:
        return await embed_inputs(call, inputs)
    except ApiError as exc:
        if len(labels) <= call.model.max_batch_size:
            names = "|".join(map(re.escape, inputs))
            exc.message = re.sub(rf"\b({names})\[(\d+)\]",
                                 lambda m: labels[int(m[2])] if int(m[2]) < len(labels) else m[0], exc.message)
        raise


async def embed_inputs(call: RouteCall, inputs: dict[str, list],
                       parameters: dict | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """One inference, and the same inputs mirrored to a shadow version where one is rolled out."""
    state, model = call.state, call.model
    answer = await call.infer_inputs(inputs, parameters)
    vectors = model.contract.vectors(answer)

    async def shadow_vectors(ensemble: str) -> np.ndarray:
        return model.contract.vectors(await state.backend.infer(model, inputs, list(model.contract.output_names),
                                                                ensemble, parameters))

    state.rollouts.mirror(model.name, vectors, shadow_vectors)
    return vectors, answer


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


def interleaved(n: int, parts: list[tuple[list[int], dict[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    """Answers to parts of a request (each with the request's indices it holds) as one answer in the request's
    order: every output all parts returned."""
    names = set.intersection(*(set(answer) for _, answer in parts))
    merged = {}
    for name in names:
        first = parts[0][1][name]
        out = np.empty((n, *first.shape[1:]), dtype=first.dtype)
        for indices, answer in parts:
            out[indices] = answer[name]
        merged[name] = out
    return merged


async def text_windows(state: ApiState, model: ServedModel, inputs: Sequence[Input], prompt: str,
                       asked: bool | None) -> Windows | None:
    """`windows_of` for a request of texts; chunked processing asked of one that holds images is refused."""
    if all(isinstance(x, str) for x in inputs):
        return await windows_of(state, model, list(inputs), prompt, asked)  # type: ignore[arg-type]
    if asked:
        raise invalid("chunked processing is for texts; this request holds images", "enable_chunked_processing", 400)
    return None


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


@functools.lru_cache(maxsize=None)
def calibration_of(path: Path) -> Calibration | None:
    """The quantization ranges recorded beside a served version's graph (read once); None where it records none."""
    return Calibration.read(path)


def quantized(request: Request, model: ServedModel, vectors: np.ndarray, precision: str, param: str) -> np.ndarray:
    """The vectors at `precision`, as sentence-transformers' quantize_embeddings computes them; int8 and uint8
    with the ranges recorded for their size, named in the response's RANGES_HEADER."""
    if precision not in RANGED:
        return quantize(vectors, precision)
    calibration = calibration_of(model.version_dir / QUANTIZATION_FILE)
    dim = vectors.shape[1]
    if calibration is None or dim not in calibration.ranges:
        raise invalid(f"{precision} embeddings are not served for {model.name}: its repository records no "
                      f"quantization ranges for {dim} values (regenerate it with this tritonize)", param, 400)
    label = calibration.label(dim).encode("ascii", "backslashreplace").decode("ascii")
    noted(request)["response_headers"] = {RANGES_HEADER: label}
    return quantize(vectors, precision, calibration.of_size(dim))


def base64_floats(vectors: np.ndarray) -> list[str]:
    return [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]


def embedders() -> tuple[TaskContract, ...]:
    """The tasks whose models the embeddings routes serve: this one's, and each that embeds images (its texts
    too)."""
    return (CONTRACT, *inference.image_inputs())


def openai_inputs(body: b.EmbeddingRequest, model: ServedModel, limit: int) -> tuple[list[Input], str]:
    """OpenAI's `input` (texts, or Jina's text and image items, one vector each), or vLLM's `messages` (one
    text or one image: one vector), and the field they came in."""
    if (body.input is None) == (body.messages is None):
        raise invalid(f"send `input` or `messages`, not {'both' if body.input is not None else 'neither'}",
                      "input", 422)
    if body.messages is not None:
        if model.contract not in inference.image_inputs():
            raise invalid(f"`messages` is served for models that embed images, and {model.name} embeds texts (no "
                          "chat template is applied here): send `input`", "messages", 400)
        parts = [p for m in body.messages for p in ([b.ContentPart(type="text", text=m.content)]
                                                     if isinstance(m.content, str) else m.content)]
        if len(parts) != 1:
            raise invalid(f"`messages` holds {len(parts)} contents, and one request of `messages` is one input: "
                          "one text or one image (send several in `input`)", "messages", 400)
        return [part_input(parts[0], "messages[0].content")], "messages"
    value = body.input
    if isinstance(value, str) or not any(isinstance(x, b.InputItem) for x in value):
        return texts_of(value, "input", limit), "input"
    items = list(value)
    if len(items) > limit:
        raise invalid(f"`input` holds {len(items)} inputs, over this server's limit of {limit} per request "
                      "(--max-client-batch-size)", "input", 413)
    return [item_input(x, f"input[{i}]") for i, x in enumerate(items)], "input"


def item_input(item: Any, param: str) -> Input:
    """A text, or Jina's {"text": ...} or {"image": ...}."""
    if isinstance(item, str):
        return texts_of(item, param, 1)[0]
    if not isinstance(item, b.InputItem):
        raise invalid(f"`{param}` holds token ids: send text, the server tokenizes it with the model's own "
                      "tokenizer", param, 422)
    if (item.text is None) == (item.image is None):
        raise invalid(f"`{param}` must hold `text` or `image`, one of them", param, 422)
    return texts_of(item.text, f"{param}.text", 1)[0] if item.text is not None else image_of(item.image,
                                                                                              f"{param}.image")


def part_input(part: b.ContentPart, param: str) -> Input:
    """A content part: {"type": "text", "text": ...} or {"type": "image_url", "image_url": {"url": ...}}."""
    if part.type == "text":
        if part.text is None:
            raise invalid(f"`{param}` is a text part without `text`", param, 422)
        return texts_of(part.text, f"{param}.text", 1)[0]
    if part.image_url is None:
        raise invalid(f"`{param}` is an image_url part without `image_url`", param, 422)
    return image_of(part.image_url.url, f"{param}.image_url.url")


def cohere_inputs(body: b.CohereEmbedRequest, model: ServedModel, limit: int) -> tuple[list[Input], str]:
    """Cohere's `texts`, `images` (data URIs) or `inputs` (each one content part here: a model of two towers
    embeds a text or an image, never both as one), one of them, and its name."""
    given = [name for name in ("texts", "images", "inputs") if getattr(body, name) is not None]
    if {"images", "inputs"} & set(given) and model.contract not in inference.image_inputs():
        param = "images" if body.images is not None else "inputs"
        raise invalid(f"{model.name} embeds texts only: send `texts`", param, 400)
    if len(given) != 1:
        raise invalid(f"send one of `texts`, `images` or `inputs` ({' and '.join(given) or 'none'} sent)",
                      given[-1] if given else "texts", 422)
    if body.texts is not None:
        return texts_of(body.texts, "texts", limit), "texts"
    items = body.images if body.images is not None else body.inputs
    if not items:
        raise invalid(f"`{given[0]}` must not be empty", given[0], 422)
    if len(items) > limit:
        raise invalid(f"`{given[0]}` holds {len(items)} inputs, over this server's limit of {limit} per request "
                      "(--max-client-batch-size)", given[0], 413)
    if body.images is not None:
        return [image_of(x, f"images[{i}]") for i, x in enumerate(body.images)], "images"
    found = []
    for i, item in enumerate(body.inputs):
        if len(item.content) != 1:
            raise invalid(f"`inputs[{i}].content` holds {len(item.content)} parts: each input is one text or one "
                          "image here (the towers embed each alone)", f"inputs[{i}].content", 400)
        found.append(part_input(item.content[0], f"inputs[{i}].content[0]"))
    return found, "inputs"


@openai.post("/v1/embeddings", responses={**documented(s.OpenAIError, INFERS), **RANGES_DOCUMENTED})
@answered
async def openai_embeddings(body: b.EmbeddingRequest, request: Request) -> b.EmbeddingResponse:
    """float32 vectors, their bytes in base64, or an int8, uint8, binary or ubinary embedding's bytes in base64;
    `input_type` (NVIDIA NIM's query | passage) selects the prompt the model declares for it."""
    call = RouteCall.of(request, embedders(), body.model)
    state, model = call.state, call.model
    inputs, param = openai_inputs(body, model, state.settings.max_client_batch_size)
    if body.dimensions is not None and body.dimensions < 1:
        raise invalid("`dimensions` must be at least 1", "dimensions", 400)
    prompt = input_prompt(model, body.input_type)
    windows = await text_windows(state, model, inputs, prompt, chunking(body.enable_chunked_processing, body.truncate))
    parameters = cut_at_start(model, "truncate", "START") if body.truncate == "START" else None
    vectors, answer = await embed(call, inputs, prompt, param, parameters, windows)
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
    call = RouteCall.of(request, embedders(), body.model)
    state, model = call.state, call.model
    inputs, param = cohere_inputs(body, model, state.settings.max_client_batch_size)
    if body.max_tokens is not None and body.max_tokens < model.max_length:
        raise invalid(f"max_tokens {body.max_tokens} is not served: {model.name} reads the first {model.max_length} "
                      "tokens of each text (truncate NONE refuses a longer one)", "max_tokens", 400)
    if not body.embedding_types:
        raise invalid("`embedding_types` must not be empty", "embedding_types", 422)
    if len(set(body.embedding_types)) != len(body.embedding_types):
        raise invalid("`embedding_types` names a type twice", "embedding_types", 422)
    if body.output_dimension is not None and body.output_dimension < 1:
        raise invalid("`output_dimension` must be at least 1", "output_dimension", 400)
    if body.input_type == "image" and any(isinstance(x, str) for x in inputs):
        raise invalid("input_type image is for images: a text takes search_query, search_document, "
                      "classification or clustering", "input_type", 422)
    prompt = "" if body.input_type == "image" else input_prompt(model, body.input_type)
    windows = await text_windows(state, model, inputs, prompt, chunking(body.enable_chunked_processing, body.truncate))
    parameters = cut_at_start(model, "truncate", "START") if body.truncate == "START" else None
    vectors, answer = await embed(call, inputs, prompt, param, parameters, windows)
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
    pictures = sum(not isinstance(x, str) for x in inputs)
    billed = b.CohereBilledUnits.model_construct(input_tokens=tokens(answer), **({"images": pictures} if pictures else {}))
    return b.CohereEmbedResponse.model_construct(
        id=str(uuid.uuid4()), embeddings=embeddings, texts=[x for x in inputs if isinstance(x, str)],
        meta=b.CohereMeta.model_construct(api_version=b.CohereApiVersion.model_construct(version=API_VERSION),
                                          billed_units=billed, **({"chunks": windows.total} if windows else {})))


@tei.post("/embed", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed(body: b.TEIEmbedRequest, request: Request) -> b.TEIEmbeddings:
    call = RouteCall.of(request, embedders(), body.model)
    model = call.model
    parameters = direction_of(model, body.truncation_direction)
    texts = call.texts(body.inputs, "inputs")
    if not body.normalize and model.head.normalize:
        raise invalid(f"normalize false is not served: {model.name} normalises inside its graph (its Normalize "
                      "module), so only unit vectors exist to return", "normalize")
    vectors, answer = await embed(call, texts, prompt_of(model, body.prompt_name), parameters=parameters)
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
    call = RouteCall.of(request, embedders(), body.model)
    model = call.model
    parameters = body.parameters or b.TEISimilarityParameters()
    cut = direction_of(model, parameters.truncation_direction, "parameters.truncation_direction")
    sentences = call.texts(body.inputs.sentences, "inputs.sentences")
    source = texts_of(body.inputs.source_sentence, "inputs.source_sentence", 1)
    vectors, answer = await embed(call, source + sentences, prompt_of(model, parameters.prompt_name), parameters=cut)
    refuse_truncated(answer, parameters.truncate, model)
    return b.TEISimilarities.model_construct(cosines(vectors[0], vectors[1:]).tolist())


def cosines(source: np.ndarray, others: np.ndarray) -> np.ndarray:
    """The cosine of each row of `others` with `source`, in float64 (0 for a zero vector)."""
    source, others = source.astype(np.float64), others.astype(np.float64)
    norms = np.linalg.norm(others, axis=1) * np.linalg.norm(source)
    return np.divide(others @ source, norms, out=np.zeros(len(others)), where=norms > 0)
