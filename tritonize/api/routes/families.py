"""The families of clients the routes speak to: each family's tag in the document and the error envelope its
clients parse. A route is declared on its family's `Router`, wherever it lives (api/routes/<family>.py for the
routes several tasks share, a task's api.py for its own)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fastapi import APIRouter

Envelope = Literal["openai", "tei", "nim", "cohere", "kserve"]  # ApiError's methods of those names write them


@dataclass(frozen=True)
class Family:
    tag: str
    envelope: Envelope = "openai"


OPENAI = Family("OpenAI")
COHERE_EMBED = Family("Cohere / Jina", "cohere")  # Cohere's envelope; its rerank keeps OpenAI's
COHERE_RERANK = Family("Cohere / Jina")
TEI = Family("text-embeddings-inference", "tei")
NIM = Family("NVIDIA NIM", "nim")
VLLM = Family("vLLM")
TRITONIZE = Family("tritonize")  # tritonize's own routes, where no standard exists
OPERATIONS = Family("operations", "tei")


class Router(APIRouter):
    """A family's routes: tagged with it, and answering errors in its envelope."""

    def __init__(self, family: Family):
        super().__init__(tags=[family.tag])
        self.family = family
