"""The client's sparse-embedding call (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Iterable

from ..calls import Infer, Text, with_prompt
from .contract import INDICES, VALUES, vectors


def sparse(texts: Iterable[Text], prompt: str = ""):
    """Sparse (SPLADE) embeddings: per text, its non-zero vocabulary ids (ascending) and their weights, as
    SparseEncoder.encode returns them (`.dense(vocab)` for the full vector, `.pairs()` for the
    text-embeddings-inference form). `prompt` is prepended to each text, as encode(prompt=...) does."""
    return vectors((yield Infer(with_prompt(texts, prompt), [INDICES, VALUES])))


CALLS = (sparse,)
