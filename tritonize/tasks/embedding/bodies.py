"""The embedding task's request and response bodies: OpenAI's embeddings (with vLLM's `messages` and Jina's image
items), Cohere's embed (v2: texts, images, inputs), and text-embeddings-inference's /embed and /similarity
(tritonize/api/schemas.py says how bodies are written)."""

from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, RootModel
from pydantic.json_schema import SkipJsonSchema
from typing_extensions import TypedDict

from ...api.schemas import Body, Dimensions, EitherDirection, Text, TextList, Texts, Usage, refused_beyond


Quantized = Literal["int8", "uint8", "binary", "ubinary"]  # tasks/embedding/quantization.py's PRECISIONS


EncodingFormat = Annotated[Literal["float", "base64", "int8", "uint8", "binary", "ubinary"], Field(
    description="float: float32 values; base64: their little-endian bytes; int8, uint8, binary, ubinary: that "
                "embedding's bytes in base64 (sentence-transformers' quantize_embeddings, one byte per value, or "
                "8 values per byte for the binary ones)")]


NimInputType = Annotated[Literal["query", "passage"], Field(
    description="NVIDIA NIM's input type: the prompt the model declares for it; without prompts, the text as it is")]


CohereInputType = Annotated[Literal["search_query", "search_document", "classification", "clustering", "image"], Field(
    description="the prompt the model declares for it; without prompts, the text as it is; image: images, "
                "for a model that embeds them")]


ImageData = Annotated[str, Field(description="an image's bytes as a data URI (data:image/png;base64,...); an "
                                             "http(s) URL only where this server allows its host "
                                             "(--allow-image-hosts; by default none, and a URL is refused)")]


class ImageUrl(Body):
    url: ImageData


class ContentPart(Body):
    """One part of a message's or an input's content: a text or an image (OpenAI's chat content parts)."""

    type: Literal["text", "image_url"]
    text: Text | None = None
    image_url: ImageUrl | None = None


class ChatMessage(Body):
    """vLLM's embeddings `messages`: a chat message whose content is a text or parts."""

    role: str = "user"
    content: Union[str, Annotated[list[ContentPart], refused_beyond(minItems=1)]]


class InputItem(Body):
    """Jina's input item: a text or an image (base64, or a data URI)."""

    text: Text | None = None
    image: ImageData | None = None


class CohereInput(Body):
    """Cohere's `inputs` item: content parts, embedded as one (one text or one image each, here)."""

    content: Annotated[list[ContentPart], refused_beyond(minItems=1)]


CohereEmbeddingType = Literal["float", "int8", "uint8", "binary", "ubinary", "base64"]


CohereTruncate = Annotated[Literal["NONE", "START", "END"], Field(
    description="END: a long text's first tokens; START: its last tokens (the tokenizer cutting on the left); "
                "NONE: a long text is refused")]


ChunkedProcessing = Annotated[Optional[bool], Field(
    description="true: a text longer than the model reads is embedded as max-length windows (the server's "
                "--chunk-overlap apart), pooled by their tokens and normalised where the model normalises; "
                "false: it is cut; none: the server's --enable-chunked-processing (docs/api.md)")]


class CohereEmbedRequest(Body):
    model: str | None = None
    texts: TextList | None = None
    images: Annotated[list[ImageData], refused_beyond(minItems=1)] | None = None
    inputs: Annotated[list[CohereInput], refused_beyond(minItems=1)] | None = None
    input_type: CohereInputType | None = None
    embedding_types: Annotated[list[CohereEmbeddingType], refused_beyond(minItems=1, maxItems=6, uniqueItems=True)] = [
        "float"]
    output_dimension: Dimensions = None
    truncate: CohereTruncate = "END"
    enable_chunked_processing: ChunkedProcessing = None
    # Accepted by the types only to reach the route's own message.
    max_tokens: SkipJsonSchema[int | None] = None


# One array per embedding type asked for: `float` is a keyword, so the typed dict's functional form.
CohereEmbeddingsByType = TypedDict("CohereEmbeddingsByType", {
    "float": list[list[float]], "int8": list[list[int]], "uint8": list[list[int]], "binary": list[list[int]],
    "ubinary": list[list[int]], "base64": list[str]}, total=False)


class CohereApiVersion(Body):
    version: str


class CohereBilledUnits(Body):
    input_tokens: int = Field(description="the tokens the model read for the request's texts")
    images: Optional[int] = Field(None, description="the images embedded, where the request held any")


class CohereMeta(Body):
    api_version: CohereApiVersion
    billed_units: CohereBilledUnits
    chunks: Optional[int] = Field(None, description="with chunked processing: the windows embedded in all")


class CohereEmbedResponse(Body):
    id: str
    embeddings: CohereEmbeddingsByType
    texts: list[str]
    meta: CohereMeta
    response_type: Literal["embeddings_by_type"] = "embeddings_by_type"


class EmbeddingRequest(Body):
    """`input` (texts, or Jina's text and image items), or vLLM's `messages` (one input)."""

    input: Union[Texts, Annotated[list[Union[Text, InputItem]], refused_beyond(minItems=1)], None] = None
    messages: Annotated[list[ChatMessage], refused_beyond(minItems=1)] | None = None
    model: str | None = None
    encoding_format: EncodingFormat = "float"
    dimensions: Dimensions = None
    input_type: NimInputType | None = None
    user: str | None = None
    truncate: Optional[CohereTruncate] = Field(None, description=(
        "NVIDIA NIM's: END or none, a long text's first tokens; START, its last; NONE: a long text is refused (400)"))
    enable_chunked_processing: ChunkedProcessing = None


class EmbeddingUsage(Usage):
    chunks: Optional[int] = Field(None, description="with chunked processing: the windows embedded in all")


# A row of the hot route is a typed dict: built as cheaply as the dict it is (a model per row cost ~4 µs).
class Embedding(TypedDict):
    """One input's vector."""

    object: Literal["embedding"]
    index: int
    embedding: Annotated[list[float] | str, Field(description="float32 values; or, in base64, the float32 values' "
                                                              "little-endian bytes, or the int8, uint8, binary or "
                                                              "ubinary embedding's bytes")]


class EmbeddingResponse(Body):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


class TEIEmbedRequest(Body):
    inputs: Texts
    normalize: bool = True
    truncate: bool | None = None
    truncation_direction: EitherDirection = "right"
    prompt_name: str | None = None
    dimensions: Dimensions = None
    model: str | None = None


class TEIEmbeddings(RootModel[list[list[float]]]):
    """One vector per input, in order."""


class TEISimilarityInput(Body):
    source_sentence: Text
    sentences: TextList


class TEISimilarityParameters(Body):
    truncate: bool | None = None
    truncation_direction: EitherDirection = "right"
    prompt_name: str | None = None


class TEISimilarityRequest(Body):
    inputs: TEISimilarityInput
    parameters: TEISimilarityParameters | None = None
    model: str | None = None


class TEISimilarities(RootModel[list[float]]):
    """The cosine similarity of each sentence's embedding with the source sentence's, in order."""
