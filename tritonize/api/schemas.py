"""Request and response bodies, in the shapes their clients already send and parse: what every route shares (the
error envelopes, texts, usage) and the bodies of the routes several tasks serve (OpenAI's model list, Cohere's and
Jina's rerank, text-embeddings-inference's /rerank, /tokenize, /decode and /info, NVIDIA NIM's /v1/ranking, vLLM's
/score). A task's own routes declare their bodies in the task's package (tritonize/tasks/<task>/api.py). The
requests validate what comes in; the handlers return the responses, so /openapi.json is what they answer. A response
is built without validation (`model_construct`, numpy rows kept as they are) and written by orjson
(state.json_response): the hot routes pay for neither a second validation nor float64 digits.

What the routes refuse beyond pydantic's types (empty or blank texts, token ids, `truncation_direction: left` where
the route cuts only at the end) is
declared in the schema too (`minLength`, `minItems`, the enum), while the routes keep refusing it with their
own messages; token-id arrays are accepted by the types only to reach that message, and left out of the
document, since they are never served.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, RootModel
from pydantic.json_schema import SkipJsonSchema, WithJsonSchema
from typing_extensions import TypedDict


def refused_beyond(**schema) -> Field:
    """What the route refuses with its own message, declared in the document (pydantic does not check it)."""
    return Field(json_schema_extra=schema)


def whole(value: object) -> object:
    """JSON Schema's integer is a number without a fraction: 3.0 is 3 (a string or a boolean never is)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(whole)]  # a request's integer, strict otherwise (bounds go before `whole`)
# A text holds a character that is not white space: neither JSON Schema's (ECMAScript's \s) nor Python's, which the
# tokenizer step strips (routes.parameters.blank refuses the others with 422).
TEXT_PATTERN = r"[^\s\u001c-\u001f\u0085]"
# The same where every model a route serves tokenizes in graphs, which refuse a NUL character (catalog.py's
# refuse_unreadable): openapi.py writes it in.
GRAPH_TEXT_PATTERN = r"^[^\u0000]*[^\s\u001c-\u001f\u0085\u0000][^\u0000]*$"
Text = Annotated[str, refused_beyond(minLength=1, pattern=TEXT_PATTERN)]
TextList = Annotated[list[Text], refused_beyond(minItems=1)]
TokenIds = list[int]
Texts = Union[Text, Annotated[list[Union[Text, SkipJsonSchema[TokenIds]]], refused_beyond(minItems=1)],
              SkipJsonSchema[TokenIds]]
Direction = Annotated[Literal["right", "left", "Right", "Left"],
                      WithJsonSchema({"type": "string", "enum": ["right", "Right"],
                                      "description": "the tokenizer cuts long texts on the right; left is refused"})]
# Where the route serves both: left keeps a long text's last tokens (the tokenizer step's direction="left").
EitherDirection = Annotated[Literal["right", "left", "Right", "Left"], Field(
    description="which end of a long text is cut: right keeps its first tokens, left its last (as the tokenizer "
                "cuts with truncation_side left)")]
Dimensions = Annotated[Optional[Annotated[Integer, refused_beyond(minimum=1)]], Field(
    description="Matryoshka models only, at a size declared at generation")]


class Body(BaseModel):
    """Unknown fields are ignored, as the services these shapes come from ignore them. Types are strict: a value
    of another JSON type is refused, never coerced (`"truncate": 0` is not false, `"top_n": "3"` is not 3)."""

    model_config = ConfigDict(extra="ignore", strict=True)


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


class CohereError(Body):
    """Cohere's error envelope (its /v2/embed)."""

    id: str
    message: str


# -- OpenAI ------------------------------------------------------------------------------------------------------
class Usage(Body):
    prompt_tokens: int
    total_tokens: int


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
    top_n: Optional[Annotated[int, Field(ge=1), BeforeValidator(whole)]] = None
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
class TEIRerankRequest(Body):
    query: Text
    texts: TextList
    raw_scores: bool = Field(False, description="true: a cross-encoder's logits, before its activation")
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


# -- NVIDIA NIM ranking; vLLM's score; text-embeddings-inference's decode --------------------------------------
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
    logit: float = Field(description="the model's raw score: a cross-encoder's logit, before its activation")


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
    truncate_prompt_tokens: Optional[Annotated[Literal[-1], BeforeValidator(whole)]] = Field(
        None, description="-1 or none: long pairs are cut at the model's max length")
    use_activation: bool | None = Field(None, description="false: a cross-encoder's logits, before its activation")


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


TokenId = Annotated[int, Field(ge=0, description="an id of the model's vocabulary (one beyond it is refused, 422)"),
                    BeforeValidator(whole)]


class TEIDecodeRequest(Body):
    ids: Union[list[TokenId], Annotated[list[list[TokenId]], refused_beyond(minItems=1)]]
    skip_special_tokens: bool = True
    model: str | None = None


class TEIDecoded(RootModel[list[str]]):
    """One text per list of ids."""


# -- operations ---------------------------------------------------------------------------------------------------
class Health(Body):
    status: Literal["ok"] = "ok"
    models: list[str]
    latency_ms: float
