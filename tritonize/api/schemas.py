"""Request and response bodies, in the shapes their clients already send and parse.

OpenAI's embeddings API; Cohere's and Jina's rerank; text-embeddings-inference's /embed, /rerank, /predict,
/tokenize and /info; and tritonize's own routes where no standard exists (entities, answers). The models
validate what comes in and document what goes out (/openapi.json); the heavy responses are written straight
from numpy arrays.
"""

from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

# Texts: a string or a list of strings. Token-id arrays are part of both APIs' schemas; they are refused with
# a clear 422 (the server tokenizes itself), so they are typed here to reach that message.
TokenIds = list[int]
Texts = Union[str, list[Union[str, TokenIds]], TokenIds, list[TokenIds]]


class Body(BaseModel):
    """Unknown fields are ignored, as the services these shapes come from ignore them."""

    model_config = ConfigDict(extra="ignore")


# -- OpenAI ------------------------------------------------------------------------------------------------------
class EmbeddingRequest(Body):
    input: Texts
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, description="Matryoshka models only (declared at generation)")
    user: str | None = None


class Embedding(Body):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class Usage(Body):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(Body):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class ModelCard(Body):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "tritonize"
    task: str


class ModelList(Body):
    object: Literal["list"] = "list"
    data: list[ModelCard]


# -- Cohere / Jina rerank -----------------------------------------------------------------------------------------
class Document(Body):
    text: str


class RerankRequest(Body):
    query: str
    documents: list[Union[str, Document]]
    model: str | None = None
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False


class RerankResult(Body):
    index: int
    relevance_score: float
    document: Document | None = None


class RerankUsage(Body):
    total_tokens: int


class RerankResponse(Body):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage


# -- text-embeddings-inference ------------------------------------------------------------------------------------
class TEIEmbedRequest(Body):
    inputs: Texts
    normalize: bool = True
    truncate: bool | None = None
    truncation_direction: Literal["right", "left", "Right", "Left"] = "right"
    prompt_name: str | None = None
    dimensions: int | None = None
    model: str | None = None


class TEISparseRequest(Body):
    inputs: Texts
    truncate: bool | None = None
    truncation_direction: Literal["right", "left", "Right", "Left"] = "right"
    prompt_name: str | None = None
    model: str | None = None


class TEISparseValue(Body):
    index: int
    value: float


class TEIRerankRequest(Body):
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool | None = None
    truncation_direction: Literal["right", "left", "Right", "Left"] = "right"
    model: str | None = None


class TEIRank(Body):
    index: int
    score: float
    text: str | None = None


class TEIPredictRequest(Body):
    inputs: Union[str, list[str], list[list[str]]]
    raw_scores: bool = False
    truncate: bool | None = None
    truncation_direction: Literal["right", "left", "Right", "Left"] = "right"
    model: str | None = None


class TEIPrediction(Body):
    score: float
    label: str


class TEITokenizeRequest(Body):
    inputs: Union[str, list[str]]
    add_special_tokens: bool = True
    prompt_name: str | None = None
    model: str | None = None


class TEIToken(Body):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


# -- tritonize's own ----------------------------------------------------------------------------------------------
class EntitiesRequest(Body):
    inputs: Union[str, list[str]]
    model: str | None = None


class EntitiesResult(Body):
    index: int
    entities: list[dict]


class EntitiesResponse(Body):
    model: str
    data: list[EntitiesResult]


class QAPair(Body):
    question: str
    context: str


class AnswersRequest(Body):
    inputs: Union[QAPair, list[QAPair]]
    model: str | None = None


class AnswerResult(Body):
    index: int
    answer: dict | None


class AnswersResponse(Body):
    model: str
    data: list[AnswerResult]
