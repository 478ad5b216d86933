"""The image-and-text task's part in the API: its models answer the embeddings routes (OpenAI's /v1/embeddings,
Cohere's /v2/embed, the embedding task's api.py) for texts and, through IMAGES, for images; and its row of the
route table (tritonize/api/task_routes.py)."""

from __future__ import annotations

from ...api.task_routes import TaskRoutes
from ..embedding.contract import INPUT_TYPE_PROMPTS
from .contract import CONTRACT, Head

ROUTERS = ()  # its routes are the embedding task's, which serve every task with IMAGES

# The input types a request may name: none selects a prompt (the towers read texts as they are); `image` is
# Cohere's for images.
INPUT_TYPES = (*INPUT_TYPE_PROMPTS, "image")


def accepts(heads: tuple[Head, ...]) -> dict[str, dict]:
    """The one size every served model returns (no Matryoshka cuts), and every input type."""
    sizes = sorted({h.dim for h in heads}, reverse=True)
    dimensions = {"anyOf": [{"type": "integer", "enum": sizes}, {"type": "null"}],
                  "description": "the served size (no other is declared)"}
    return {"dimensions": dimensions, "output_dimension": dimensions,
            "input_type": {"anyOf": [{"type": "string", "enum": list(INPUT_TYPES)}, {"type": "null"}],
                           "description": "selects no prompt: texts are embedded as they are; image: images"}}


# /embed and /similarity: text-embeddings-inference's, for its texts (the text tower).
ROUTES = TaskRoutes(CONTRACT, ("/v1/embeddings", "/v2/embed", "/embed", "/similarity"),
                    lambda a, name, text: {"model": name, "input": [text]}, accepts=accepts)

IMAGES = CONTRACT.image_request  # a request's images (encoded files' bytes) -> the ensemble's IMAGE input
