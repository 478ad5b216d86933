"""Raw request texts in, bounded: the one copy of the checks every first step makes.

Served: copied verbatim next to the tokenizer step's and the
question-answering step's model.py; it imports only numpy. A text's size is
checked before it is decoded or tokenized, so one huge text costs its sender
an error at once, not every other request a wait behind it.
"""

from __future__ import annotations

import numpy as np

REJECT, CUT = "reject", "cut"  # what a step does with a text over its byte limit


class InvalidText(ValueError):
    """A request's text cannot be used: reported to that request only, as INVALID_ARG."""


def decode(raw: np.ndarray, name: str, max_bytes: int = 0, long_texts: str = REJECT) -> list[str]:
    """BYTES elements -> str. Over `max_bytes` (0: no limit), a text is refused, or with CUT kept up to the
    limit (a character the cut splits is dropped, as text-embeddings-inference's `truncate` keeps a prefix).
    Invalid UTF-8 and blank texts are the sender's error."""
    texts = []
    for i, item in enumerate(raw.reshape(-1)):
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        cut = bool(max_bytes) and len(data) > max_bytes
        if cut and long_texts != CUT:
            raise InvalidText(
                f"{name}[{i}] is {len(data)} bytes, over this model's limit of {max_bytes} bytes per text: "
                "send shorter texts (the model reads only the first tokens of a text)"
            )
        if cut:
            data = data[:max_bytes]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            if not (cut and exc.reason == "unexpected end of data"):
                raise InvalidText(f"{name}[{i}] is not valid UTF-8 (byte {exc.start}): send UTF-8 encoded text") from None
            text = data[: exc.start].decode("utf-8")
        if not text.strip():
            raise InvalidText(f"{name}[{i}] is empty: send at least one non-blank character")
        texts.append(text)
    if not texts:
        raise InvalidText(f"{name} has no elements")
    return texts
