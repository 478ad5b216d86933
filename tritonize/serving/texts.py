"""Raw request texts in, bounded: the one copy of the checks every first step makes.

Served: copied verbatim next to the tokenizer step's, the question-answering
step's and the post step's model.py; it imports only the standard library and
numpy. A text's size is checked before it is decoded or tokenized, so one
huge text costs its sender an error at once, not every other request a wait
behind it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

REJECT, CUT = "reject", "cut"  # what a step does with a text over its byte limit


class InvalidText(ValueError):
    """A request's text cannot be used: reported to that request only, as INVALID_ARG; `reason` is what the
    step counts it under (serving/metrics.py)."""

    def __init__(self, message: str, reason: str = "tokenizer"):
        super().__init__(message)
        self.reason = reason


def decode(raw: np.ndarray, name: str, max_bytes: int = 0, long_texts: str = REJECT,
           counts: dict | None = None) -> list[str]:
    """BYTES elements -> str. Over `max_bytes` (0: no limit), a text is refused, or with CUT kept up to the
    limit (a character the cut splits is dropped, as text-embeddings-inference's `truncate` keeps a prefix).
    Invalid UTF-8 and blank texts are the sender's error. `counts["cut"]` counts the texts cut."""
    texts = []
    for i, item in enumerate(raw.reshape(-1)):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        cut = bool(max_bytes) and len(data) > max_bytes
        if cut and long_texts != CUT:
            raise InvalidText(
                f"{name}[{i}] is {len(data)} bytes, over this model's limit of {max_bytes} bytes per text: "
                "send shorter texts (the model reads only the first tokens of a text)", "too_large"
            )
        if cut:
            data = data[:max_bytes]
            if counts is not None:
                counts["cut"] = counts.get("cut", 0) + 1
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if not (cut and exc.reason == "unexpected end of data"):
                raise InvalidText(f"{name}[{i}] is not valid UTF-8 (byte {exc.start}): send UTF-8 encoded text",
                                  "invalid_utf8") from None
            text = data[: exc.start].decode("utf-8")
        if not text.strip():
            raise InvalidText(f"{name}[{i}] is empty: send at least one non-blank character", "empty")
        texts.append(text)
    if not texts:
        raise InvalidText(f"{name} has no elements", "no_elements")
    return texts


def unk_token_id(tokenizer: Any, unk_token: str | Mapping[str, Any] | None = None) -> int | None:
    """The id a `tokenizers.Tokenizer` gives what it cannot map (``tokenizer.unk_token_id`` in transformers).

    Pass ``unk_token`` from ``tokenizer_config.json`` when there is one (it may be
    an AddedToken dict); otherwise the tokenizer model's own unknown token is
    used. Compute it once when the served model loads.
    """
    if isinstance(unk_token, Mapping):
        unk_token = unk_token.get("content")
    if unk_token is None:
        unk_token = getattr(tokenizer.model, "unk_token", None)
    if unk_token is not None:
        return tokenizer.token_to_id(str(unk_token))
    # Unigram keeps an id, not a token, and the Python binding does not expose it.
    model = json.loads(tokenizer.to_str()).get("model", {})
    unk = model.get("unk_id")
    return int(unk) if unk is not None else None
