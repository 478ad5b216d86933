"""Request and response bodies, in the shapes their clients already send and parse.

OpenAI's embeddings API; Cohere's embed (v2) and Cohere's and Jina's rerank; text-embeddings-inference's /embed,
/rerank, /predict, /similarity, /embed_all, /tokenize, /decode and /info; NVIDIA NIM's /v1/ranking; vLLM's /score
and /classify; and tritonize's own routes where no standard exists (entities, answers). The requests
validate what comes in; the handlers return the responses, so /openapi.json is what they answer. A response
is built without validation (`model_construct`, numpy rows kept as they are) and written by orjson
(state.json_response): the hot routes pay for neither a second validation nor float64 digits.

What the routes refuse beyond pydantic's types (empty or blank texts, token ids, `truncation_direction: left`) is
declared in the schema too (`minLength`, `minItems`, the enum), while the routes keep refusing it with their
own messages; token-id arrays are accepted by the types only to reach that message, and left out of the
document, since they are never served.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from typing_extensions import TypedDict


def refused_beyond(**schema) -> Field:
    """What the route refuses with its own message, declared in the document (pydantic does not check it)."""
    return Field(json_schema_extra=schema)


# A text holds a character that is not white space: Triton's tokenizer step refuses a blank one (422).
Text = Annotated[str, refused_beyond(minLength=1, pattern=r"\S")]
TextList = Annotated[list[Text], refused_beyond(minItems=1)]
TokenIds = list[int]
Texts = Union[Text, Annotated[list[Union[Text, SkipJsonSchema[TokenIds]]], refused_beyond(minItems=1)],
              SkipJsonSchema[TokenIds]]
Direction = Annotated[Literal["right", "left", "Right", "Left"],
                      WithJsonSchema({"type": "string", "enum": ["right", "Right"],
                                      "description": "the tokenizer cuts long texts on the right; left is refused"})]
Dimensions = Annotated[Optional[Annotated[int, refused_beyond(minimum=1)]], Field(
    description="Matryoshka models only, at a size declared at generation")]


class Body(BaseModel):
    """Unknown fields are ignored, as the services these shapes come from ignore them."""

    model_config = ConfigDict(extra="ignore")


# -- errors -------------------------------------------------------------------------------------------------------
class OpenAIErrorDetail(Body):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(Body):
    """OpenAI's error envelope (OpenAI's and Cohere/Jina's routes, tritonize's own)."""

    error: OpenAIErrorDetail


class TEIError(Body):
    """text-embeddings-inference's error envelope (its routes and the operations)."""

    error: str
    error_type: Literal["Validation", "NotFound", "Unauthorized", "Overloaded", "Backend", "Unhealthy"]


# -- quantized and typed embeddings: Cohere's /v2/embed, and the types /v1/embeddings adds ------------------------
Quantized = Literal["int8", "uint8", "binary", "ubinary"]  # tasks/embedding/quantization.py's PRECISIONS
EncodingFormat = Annotated[Literal["float", "base64", "int8", "uint8", "binary", "ubinary"], Field(
    description="float: float32 values; base64: their little-endian bytes; int8, uint8, binary, ubinary: that "
                "embedding's bytes in base64 (sentence-transformers' quantize_embeddings, one byte per value, or "
                "8 values per byte for the binary ones)")]
NimInputType = Annotated[Literal["query", "passage"], Field(
    description="NVIDIA NIM's input type: the prompt the model declares for it; without prompts, the text as it is")]
CohereInputType = Annotated[Literal["search_query", "search_document", "classification", "clustering"], Field(
    description="the prompt the model declares for it; without prompts, the text as it is")]
CohereEmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]
CohereTruncate = Annotated[Literal["NONE", "START", "END"], WithJsonSchema(
    {"type": "string", "enum": ["NONE", "END"],
     "description": "END: a long text's first tokens; NONE: a long text is refused; START is refused (the "
                    "tokenizer cuts on the right)"})]


class CohereError(Body):
    """Cohere's error envelope (its /v2/embed)."""

    id: str
    message: str


class CohereEmbedRequest(Body):
    model: str | None = None
    texts: TextList
    input_type: CohereInputType | None = None
    embedding_types: Annotated[list[CohereEmbeddingType], refused_beyond(minItems=1, maxItems=6, uniqueItems=True)] = [
        "float"]
    output_dimension: Dimensions = None
    truncate: CohereTruncate = "END"
    # Accepted by the types only to reach the route's own message.
    max_tokens: SkipJsonSchema[int | None] = None
    images: SkipJsonSchema[list | None] = None
    inputs: SkipJsonSchema[list | None] = None


# One array per embedding type asked for: `float` is a keyword, so the typed dict's functional form.
CohereEmbeddingsByType = TypedDict("CohereEmbeddingsByType", {
    "float": list[list[float]], "int8": list[list[int]], "uint8": list[list[int]], "binary": list[list[int]],
    "ubinary": list[list[int]], "base64": list[str]}, total=False)


class CohereApiVersion(Body):
    version: str


class CohereBilledUnits(Body):
    input_tokens: int


class CohereMeta(Body):
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits


class CohereEmbedResponse(Body):
    id: str
    embeddings: CohereEmbeddingsByType
    texts: list[str]
    meta: CohereMeta
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


# -- OpenAI ------------------------------------------------------------------------------------------------------
class EmbeddingRequest(Body):
    input: Texts
    model: str | None = None
    encoding_format: EncodingFormat = "float"
    dimensions: Dimensions = None
    input_type: NimInputType | None = None
    user: str | None = None


# A row of the hot route is a typed dict: built as cheaply as the dict it is (a model per row cost ~4 µs).
class Embedding(TypedDict):
    """One input's vector."""

    object: Literal["embedding"]
    index: int
    embedding: Annotated[list[float] | str, Field(description="float32 values; or, in base64, the float32 values' "
                                                              "little-endian bytes, or the int8, uint8, binary or "
                                                              "ubinary embedding's bytes")]


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
    text: Text


class RerankRequest(Body):
    query: Text
    documents: Annotated[list[Union[Text, Document]], refused_beyond(minItems=1)]
    model: str | None = None
    top_n: int | None = Field(None, ge=1)
    return_documents: bool = False


class RerankResult(Body):
    index: int
    relevance_score: float
    document: Document | None = Field(None, description="with return_documents only")


class RerankUsage(Body):
    total_tokens: int


class BilledUnits(Body):
    search_units: int


class InputTokens(Body):
    input_tokens: int


class RerankMeta(Body):
    billed_units: BilledUnits
    tokens: InputTokens


class RerankResponse(Body):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta


# -- text-embeddings-inference ------------------------------------------------------------------------------------
class TEIEmbedRequest(Body):
    inputs: Texts
    normalize: bool = True
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    prompt_name: str | None = None
    dimensions: Dimensions = None
    model: str | None = None


class TEIEmbeddings(RootModel[list[list[float]]]):
    """One vector per input, in order."""


class TEISparseRequest(Body):
    inputs: Texts
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    prompt_name: str | None = None
    model: str | None = None


class TEISparseValue(Body):
    index: int
    value: float


class TEISparseEmbeddings(RootModel[list[list[TEISparseValue]]]):
    """Per input, its terms: vocabulary ids ascending."""


class TEIRerankRequest(Body):
    query: Text
    texts: TextList
    raw_scores: bool = False
    return_text: bool = False
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    model: str | None = None


class TEIRank(Body):
    index: int
    score: float
    text: str | None = Field(None, description="with return_text only")


class TEIRanks(RootModel[list[TEIRank]]):
    """Every text, best first."""


class TEIPredictRequest(Body):
    inputs: Union[Text, TextList, Annotated[list[Annotated[list[Text], refused_beyond(minItems=1, maxItems=1)]],
                                            refused_beyond(minItems=1)]]
    raw_scores: bool = False
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    model: str | None = None


class TEIPrediction(Body):
    score: float
    label: str


class TEIPredictions(RootModel[Union[list[TEIPrediction], list[list[TEIPrediction]]]]):
    """Every label, best first: one list for one text, a list per text for a list."""


class TEITokenizeRequest(Body):
    inputs: Union[Text, TextList]
    add_special_tokens: bool = True
    prompt_name: str | None = None
    model: str | None = None


class TEIToken(Body):
    id: int
    text: str
    special: bool
    start: int | None
    stop: int | None


class TEITokens(RootModel[list[list[TEIToken]]]):
    """Per input, its tokens as the served tokenizer cuts them."""


class TEIInfo(Body):
    model_id: str
    model_sha: str | None
    model_dtype: str
    model_type: dict[str, dict] = Field(description="text-embeddings-inference's model type: one key, with its "
                                                    "parameters")
    max_concurrent_requests: int
    max_input_length: int
    max_batch_tokens: int
    max_batch_requests: int | None
    max_client_batch_size: int
    auto_truncate: bool
    tokenization_workers: int
    version: str
    sha: str | None
    docker_label: str | None
    task: str
    source: str | None


# -- NVIDIA NIM ranking; vLLM's score and classify; text-embeddings-inference's similarity, embed_all, decode -----
class NIMError(Body):
    """NVIDIA NIM's error envelope (/v1/ranking)."""

    object: Literal["error"]
    message: str
    detail: dict[str, str]
    type: str


class NIMText(Body):
    text: Text


class NIMRankingRequest(Body):
    query: NIMText
    passages: Annotated[list[NIMText], refused_beyond(minItems=1)]
    model: str | None = None
    truncate: Literal["NONE", "END"] = Field("NONE", description="NONE: a pair longer than the model reads is "
                                                                 "refused (400); END: it is cut at the model's "
                                                                 "max length")


class NIMRanking(Body):
    index: int
    logit: float = Field(description="the model's raw score (served for rerankers whose graph applies no "
                                     "activation)")


class NIMRankingResponse(Body):
    rankings: list[NIMRanking] = Field(description="every passage, best first")
    usage: Usage


class ScoreRequest(Body):
    """vLLM's /score: pairs of `text_1` and `text_2` (or, as its newer clients name them, `queries` and
    `documents`, or `data_1` and `data_2`), one to one, one to many, or pairwise (equal lengths)."""

    text_1: Union[Text, TextList, None] = None
    text_2: Union[Text, TextList, None] = None
    queries: Union[Text, TextList, None] = None
    documents: Union[Text, TextList, None] = None
    data_1: Union[Text, TextList, None] = None
    data_2: Union[Text, TextList, None] = None
    model: str | None = None
    truncate_prompt_tokens: Optional[Literal[-1]] = Field(None, description="-1 or none: long pairs are cut at "
                                                                            "the model's max length")
    use_activation: bool | None = Field(None, description="false: logits, for a model whose graph applies no "
                                                          "activation")


class ScoreData(Body):
    index: int
    object: Literal["score"] = "score"
    score: float


class ScoreResponse(Body):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ScoreData]
    usage: Usage


class ClassifyRequest(Body):
    """vLLM's /classify."""

    input: Texts
    model: str | None = None
    truncate_prompt_tokens: Optional[Literal[-1]] = Field(None, description="-1 or none: long texts are cut at "
                                                                            "the model's max length")
    use_activation: bool | None = Field(None, description="false: logits instead of the head's probabilities")


class ClassificationData(Body):
    index: int
    label: str | None = Field(description="the label of the highest score")
    probs: list[float] = Field(description="a score per label, in the model's label order")
    num_classes: int


class ClassifyResponse(Body):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ClassificationData]
    usage: Usage


class TEISimilarityInput(Body):
    source_sentence: Text
    sentences: TextList


class TEISimilarityParameters(Body):
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    prompt_name: str | None = None


class TEISimilarityRequest(Body):
    inputs: TEISimilarityInput
    parameters: TEISimilarityParameters | None = None
    model: str | None = None


class TEISimilarities(RootModel[list[float]]):
    """The cosine similarity of each sentence's embedding with the source sentence's, in order."""


class TEIEmbedAllRequest(Body):
    inputs: Texts
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    prompt_name: str | None = None
    model: str | None = None


class TEITokenStates(RootModel[list[list[list[float]]]]):
    """Per input, a vector per token."""


TokenId = Annotated[int, Field(ge=0)]


class TEIDecodeRequest(Body):
    ids: Union[list[TokenId], Annotated[list[list[TokenId]], refused_beyond(minItems=1)]]
    skip_special_tokens: bool = True
    model: str | None = None


class TEIDecoded(RootModel[list[str]]):
    """One text per list of ids."""


# -- tritonize's own ----------------------------------------------------------------------------------------------
class EntitiesRequest(Body):
    inputs: Union[Text, TextList]
    model: str | None = None


class Entity(Body):
    """A span as transformers' token-classification pipeline reports it: `entity_group` where the model
    aggregates, `entity` and `index` per token where it does not (--aggregation none)."""

    entity_group: str | None = None
    entity: str | None = None
    index: int | None = None
    score: float
    word: str
    start: int | None
    end: int | None


class EntitiesResult(Body):
    index: int
    entities: list[Entity]


class EntitiesResponse(Body):
    model: str
    data: list[EntitiesResult]


class QAPair(Body):
    question: Text
    context: Text


class AnswersRequest(Body):
    inputs: Union[QAPair, Annotated[list[QAPair], refused_beyond(minItems=1)]]
    model: str | None = None


class Answer(Body):
    """The question-answering pipeline's answer: the span and its score."""

    answer: str
    score: float
    start: int
    end: int


class AnswerResult(Body):
    index: int
    answer: Answer | None = Field(description="null where the context holds no answer")


class AnswersResponse(Body):
    model: str
    data: list[AnswerResult]


# -- operations ---------------------------------------------------------------------------------------------------
class Health(Body):
    status: Literal["ok"] = "ok"
    models: list[str]
    latency_ms: float
