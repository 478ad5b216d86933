"""The client's embedding call (tritonize/tasks/calls.py says how calls run)."""

from __future__ import annotations

from collections.abc import Iterable

from ..calls import Infer, Text, with_prompt
from .contract import OUTPUT


def embed(texts: Iterable[Text], prompt: str = ""):
    """Sentence embeddings, [N, dim] float32. `prompt` is prepended to each text, as sentence-transformers'
    encode(prompt=...) does (a folder's declared prompts are listed in its repository's tritonize.yaml)."""
    return (yield Infer(with_prompt(texts, prompt), [OUTPUT]))[OUTPUT]


CALLS = (embed,)
