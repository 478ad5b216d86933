"""Reading sentence embeddings: one vector per text under `embedding`, cut to a Matryoshka size on request."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np

from ...errors import TritonizeError
from ...spec import Head as BaseHead
from ..contract import OneVectorPerRow, TaskContract

OUTPUT = "embedding"
Library = Literal["sentence-transformers", "transformers"]

# Which declared prompt (sentence-transformers' `prompts`) a request's `input_type` selects: Cohere's /v2/embed
# types and NVIDIA NIM's (query, passage). The first name of the row the folder declares is used; a model that
# declares no prompts embeds every text as it is, whatever its input type.
INPUT_TYPE_PROMPTS: dict[str, tuple[str, ...]] = {
    "search_query": ("query", "search_query"),
    "search_document": ("document", "passage", "corpus", "search_document"),
    "classification": ("classification",),
    "clustering": ("clustering",),
    "query": ("query", "search_query"),
    "passage": ("passage", "document", "corpus", "search_document"),
}


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "embedding"
    pooling: str  # a sentence-transformers mode ("+"-joined when several are concatenated)
    normalize: bool
    dim: int
    library: Library = "transformers"  # whose modules the graph is: sentence-transformers' own, or tritonize's pooling
    dense: int = 0  # Dense projections after pooling
    prompts: tuple[tuple[str, str], ...] = ()  # (name, text) declared by the folder; clients prepend them
    # The folder's truncate_dim (config_sentence_transformers.json): its encode, and so the graph, returns the
    # first `dim` values, not re-normalised. 0: the whole vector.
    truncate_dim: int = 0
    # Matryoshka sizes a request may cut the served vector to, largest first (the served `dim` among them);
    # (): the model declares none, and a request for another size is refused.
    dimensions: tuple[int, ...] = ()

    def truncate(self, vectors: np.ndarray, dim: int) -> np.ndarray:
        """Served embeddings at one of the declared Matryoshka sizes (an API request's `dimensions`), as
        sentence-transformers' encode(truncate_dim=dim, normalize_embeddings=<the model normalises>) computes
        them. A size the model does not declare is refused: a cut the model was not trained for is not its
        answer."""
        if dim not in self.dimensions:
            declared = ", ".join(map(str, self.dimensions)) or "none"
            raise TritonizeError(
                f"this model serves {self.dim}-value embeddings and cannot be cut to {dim} values "
                f"(Matryoshka sizes declared: {declared})",
                hint="generate the repository with --matryoshka-dims if the model was trained for those sizes",
            )
        return truncate_embeddings(vectors, dim, self.normalize)

    def prompt_for(self, input_type: str) -> str:
        """The prompt a text of this input type is prefixed with (INPUT_TYPE_PROMPTS); "" for a model that
        declares no prompts. A model that declares prompts, none of them for this type, refuses it: embedding the
        bare text would not be what the model was trained to compare."""
        declared = dict(self.prompts)
        if not declared:
            return ""
        for name in INPUT_TYPE_PROMPTS[input_type]:
            if name in declared:
                return declared[name]
        raise TritonizeError(
            f"input_type {input_type} selects a prompt named {' or '.join(INPUT_TYPE_PROMPTS[input_type])}, and this "
            f"model declares only {', '.join(declared)}",
            hint=f"send one of the input types it serves: {', '.join(self.input_types)}")

    @property
    def input_types(self) -> tuple[str, ...]:
        """The input types this model serves: every one without prompts, else those a declared prompt maps to."""
        declared = dict(self.prompts)
        return tuple(t for t, names in INPUT_TYPE_PROMPTS.items() if not declared or any(n in declared for n in names))


def truncate_embeddings(vectors: np.ndarray, dim: int, normalize: bool) -> np.ndarray:
    """The first `dim` values of each vector, re-normalised to unit length when `normalize` (as
    torch.nn.functional.normalize: divided by max(norm, 1e-12))."""
    cut = np.asarray(vectors, dtype=np.float32)[..., :dim]
    if not normalize:
        return cut
    return cut / np.maximum(np.linalg.norm(cut, axis=-1, keepdims=True), 1e-12)


class EmbeddingContract(OneVectorPerRow, TaskContract):
    rollout = "shadow"
    head_type = Head
    output_names = (OUTPUT,)
    output_statistics = {"tritonize_output_centroid_similarity": OUTPUT}
    statistics_module = "embedding_statistics"
    bench_as_embeddings = True


CONTRACT = EmbeddingContract()
