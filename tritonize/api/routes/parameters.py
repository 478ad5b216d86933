"""Reading a request's parameters the way every family does: texts, images, prompts, truncation."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from ...errors import TritonizeError
from ...spec import TRUNCATION_DIRECTION
from ..catalog import ServedModel
from ..errors import invalid
from ..remote_images import RemoteImage


# White space by JSON Schema's \s (ECMAScript's: the byte-order mark too) or by Python's (what the tokenizer step
# strips: \x1c-\x1f and \x85 too): a text of nothing else is blank.
BLANK = re.compile(r"[\s\ufeff]*")


def blank(text: str) -> bool:
    return BLANK.fullmatch(text) is not None


def texts_of(value: Any, param: str, limit: int) -> list[str]:
    """A string or a list of strings; token ids, empty or blank strings and lists over the bound are refused."""
    items = [value] if isinstance(value, str) else list(value)
    if 0 < len(items) <= limit and all(isinstance(x, str) and x and not (x[0].isspace() or x[0] == "\ufeff")
                                   for x in items):
        return items  # what nearly every request holds, in one pass; any other is told what it holds, below
    if not items:
        raise invalid(f"`{param}` must not be empty", param, 422)
    if any(not isinstance(x, str) for x in items):
        raise invalid(f"`{param}` holds token ids: send text, the server tokenizes it with the model's own "
                      "tokenizer", param, 422)
    if any(not x for x in items):
        raise invalid(f"`{param}` holds an empty string", param, 422)
    if any(blank(x) for x in items):
        raise invalid(f"`{param}` holds a blank string (white space only)", param, 422)
    if len(items) > limit:
        raise invalid(f"`{param}` holds {len(items)} texts, over this server's limit of {limit} per request "
                      "(--max-client-batch-size)", param, 413)
    return items


# A data URI of base64 bytes (RFC 2397): its media type is not trusted, the image step reads the file's own header.
DATA_URI = re.compile(r"data:(?P<type>[^,;]*)(?P<params>(;[^,;]*)*?);base64,(?P<data>.*)", re.DOTALL | re.IGNORECASE)


def image_of(value: Any, param: str) -> bytes | RemoteImage:
    """An image a request sends (a data URI, or bare base64 as Jina's `image`) -> the file's bytes; an http(s)
    URL -> a RemoteImage, fetched from the hosts the operator allows, else refused (api/remote_images.py)."""
    if not isinstance(value, str) or not value.strip():
        raise invalid(f"`{param}` must be an image's bytes as a data URI (data:image/png;base64,...)", param, 422)
    value = value.strip()
    scheme = value.split(":", 1)[0].lower() if ":" in value[:16] else ""
    if scheme in ("http", "https"):
        return RemoteImage(value, param)
    if scheme and scheme != "data":
        raise invalid(f"`{param}` is a {scheme}: URI: send the image's bytes as a data URI "
                      "(data:image/png;base64,...)", param, 400)
    if scheme:
        found = DATA_URI.fullmatch(value)
        if found is None:
            raise invalid(f"`{param}` is a data URI without base64 bytes: send data:image/png;base64,...", param, 422)
        value = found["data"]
    try:
        data = base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"`{param}` is not valid base64: send the image's bytes as a data URI "
                      "(data:image/png;base64,...)", param, 422) from None
    if not data:
        raise invalid(f"`{param}` holds no bytes", param, 422)
    return data


def prompt_of(model: ServedModel, name: str | None) -> str:
    """The text a folder declares for a prompt name (sentence-transformers' `prompts`)."""
    if not name:
        return ""
    prompts = model.prompts
    if name not in prompts:
        known = ", ".join(prompts) or "none"
        raise invalid(f"prompt_name {name!r} is not declared by {model.name} (declared: {known})", "prompt_name")
    return prompts[name]


def input_prompt(model: ServedModel, input_type: str | None) -> str:
    """The prompt an `input_type` selects (embedding.INPUT_TYPE_PROMPTS); none asked: the text as it is."""
    if input_type is None:
        return ""
    try:
        return model.head.prompt_for(input_type)
    except TritonizeError as exc:
        raise invalid(f"{model.name}: {exc}", "input_type", 400) from None


def cut_at_start(model: ServedModel, param: str, asked: str) -> dict[str, str]:
    """The request parameters that have the tokenizer step keep a long text's last tokens (tokenizers'
    direction="left"); refused in one line where the served ensemble cannot."""
    refusal = model.cut_refusal
    if refusal:
        raise invalid(f"{param} {asked} is not served for {model.name}: {refusal}", param, 400)
    return {TRUNCATION_DIRECTION: "left"}


def direction_of(model: ServedModel, direction: str, param: str = "truncation_direction") -> dict[str, str] | None:
    """text-embeddings-inference's truncation_direction: Left (any case) cuts at the start, Right at the end."""
    return cut_at_start(model, param, direction) if direction.lower() == "left" else None


def right_only(direction: str) -> None:
    if direction.lower() != "right":
        raise invalid("truncation_direction left is not served: the model's tokenizer cuts long texts on the right",
                      "truncation_direction")

