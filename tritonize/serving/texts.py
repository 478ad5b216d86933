"""Raw request texts in, bounded: the one copy of the checks every first step makes.

Served: copied verbatim next to the tokenizer step's, the question-answering
step's and the post step's model.py; it imports only the standard library and
numpy. A request's size is checked before anything is decoded or tokenized, so
one huge request costs its sender an error at once, not every other request a
wait behind it. Within that bound no text is refused for its length: the step
reads it as the model reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


# What a repository that tokenizes in graphs refuses in its texts step (graph_tokenizer/texts.py), by reason: the
# words of the refusals below, without a row's index (a graph names none). The text is the name of the graph node
# that fails, so it comes back inside onnxruntime's error; `graph_refusal` finds it there.
GRAPH_REFUSALS = {
    "too_large": ("the request carries more bytes of text than this server's limit of {limit} bytes per request: send "
                  "fewer or shorter texts per request, or raise the limit (tritonize generate --max-request-bytes)"),
    "invalid_utf8": "TEXT holds a text that is not valid UTF-8: send UTF-8 encoded text",
    "empty": "TEXT holds an empty or blank text: send at least one non-blank character",
}


def graph_refusal(message: str) -> str | None:
    """The reason a texts step refused a request, where its error `message` holds one (None: another error)."""
    for reason, words in GRAPH_REFUSALS.items():
        if words.split("{", 1)[0] in message:
            return reason
    return None


class InvalidText(ValueError):
    """A request's text cannot be used: reported to that request only, as INVALID_ARG; `reason` is what the
    step counts it under (serving/metrics.py)."""

    def __init__(self, message: str, reason: str = "tokenizer"):
        super().__init__(message)
        self.reason = reason


def request_bytes(arrays: Iterable[np.ndarray]) -> int:
    """Bytes of text in a request's BYTES tensors, counted without decoding or copying them."""
    return sum(len(item.encode("utf-8")) if isinstance(item, str) else len(item)
               for raw in arrays for item in raw.reshape(-1))


def check_size(arrays: Iterable[np.ndarray], max_bytes: int) -> None:
    """Refuse a request whose texts add up to more than `max_bytes` (0: no bound)."""
    if not max_bytes:
        return
    size = request_bytes(arrays)
    if size > max_bytes:
        raise InvalidText(
            f"the request carries {size} bytes of text, over this server's limit of {max_bytes} bytes per request: "
            "send fewer or shorter texts per request, or raise the limit (tritonize generate --max-request-bytes)",
            "too_large",
        )


def decode(raw: np.ndarray, name: str) -> list[str]:
    """BYTES elements -> str. Invalid UTF-8 and blank texts are the sender's error."""
    texts = []
    for i, item in enumerate(raw.reshape(-1)):
        if isinstance(item, str):
            text = item
        else:
            try:
                text = bytes(item).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidText(f"{name}[{i}] is not valid UTF-8 (byte {exc.start}): send UTF-8 encoded text",
                                  "invalid_utf8") from None
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
