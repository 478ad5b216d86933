"""An inference request of Triton's HTTP protocol, read and bounded before anything goes to Triton.

The body's media type and encoding are checked from the headers; the JSON (or, with the binary tensor extension,
its first `Inference-Header-Content-Length` bytes) is decoded once by pydantic's core, strictly, which refuses
nesting beyond its recursion limit; each input's values are checked against its shape and type and laid out as
the bytes gRPC carries. A request that fails any of this gets a 4xx with one line, and Triton never sees it.
"""

from __future__ import annotations

import zlib
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ApiError

HEADER_LENGTH = b"inference-header-content-length"  # the binary tensor extension's header
BINARY_SIZE = "binary_data_size"  # an input's (or output's) bytes after the JSON
NESTING_LIMIT = 200  # pydantic's JSON parser refuses deeper nesting (jiter's recursion limit)
JSON_TYPES = (b"application/json", b"application/octet-stream")
ENCODINGS = {b"gzip": 31, b"deflate": 15}  # zlib's window bits for each Content-Encoding tritonclient sends

Scalar = bool | int | float | str
Datatype = Literal["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
                   "FP16", "FP32", "FP64", "BF16", "BYTES"]
NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32, "UINT64": np.uint64,
         "INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "INT64": np.int64, "FP16": np.float16,
         "FP32": np.float32, "FP64": np.float64}
# The kinds of numpy array a JSON list of each datatype may read as: bools, whole numbers, any number.
KINDS = {"BOOL": "b", "FP16": "iuf", "FP32": "iuf", "FP64": "iuf"}


class Strict(BaseModel):
    model_config = ConfigDict(strict=True, frozen=True)


class Input(Strict):
    name: str
    shape: list[int]
    datatype: Datatype
    parameters: dict[str, Scalar] = Field(default_factory=dict)
    data: list[Any] | None = None


class Output(Strict):
    name: str
    parameters: dict[str, Scalar] = Field(default_factory=dict)


class InferBody(Strict):
    id: str | None = None
    parameters: dict[str, Scalar] = Field(default_factory=dict)
    inputs: list[Input] = Field(min_length=1)
    outputs: list[Output] | None = None


def refused(message: str, status: int = 400) -> ApiError:
    return ApiError(status, message)


def media_refusal(headers: dict[bytes, bytes]) -> ApiError | None:
    """From the headers alone, before the body is read: a form (what `curl -d` sends), text or anything but JSON
    is 415, as is an encoding other than gzip or deflate."""
    given = headers.get(b"content-type")
    kind = given.split(b";", 1)[0].strip().lower() if given else b""
    if kind and kind not in JSON_TYPES and not (kind.startswith(b"application/") and kind.endswith(b"+json")):
        return refused(f"Content-Type {kind.decode('latin-1')} is not an inference request: send JSON "
                       "(curl: -H 'Content-Type: application/json')", 415)
    encoding = headers.get(b"content-encoding", b"identity").strip().lower()
    if encoding != b"identity" and encoding not in ENCODINGS:
        return refused(f"Content-Encoding {encoding.decode('latin-1')} is not taken: gzip, deflate or none", 415)
    return None


def decoded(body: bytes, headers: dict[bytes, bytes], limit: int) -> bytes:
    """The body as sent before its Content-Encoding, bounded as a plain body is."""
    bits = ENCODINGS.get(headers.get(b"content-encoding", b"").strip().lower())
    if bits is None:
        return body
    inflate = zlib.decompressobj(bits)
    try:
        plain = inflate.decompress(body, limit + 1)
    except zlib.error as exc:
        raise refused(f"the body is not valid {headers[b'content-encoding'].decode('latin-1')} data: {exc}") from None
    if len(plain) > limit:
        raise refused(f"the body inflates past this server's limit of {limit} bytes (--max-body-bytes)", 413)
    if not inflate.eof:
        raise refused("the compressed body ends before its data does")
    return plain


def split(body: bytes, headers: dict[bytes, bytes]) -> tuple[bytes, memoryview]:
    """The JSON and the binary tensor data after it (the binary tensor extension)."""
    given = headers.get(HEADER_LENGTH)
    if given is None:
        return body, memoryview(b"")
    if not given.strip().isdigit():
        raise refused(f"Inference-Header-Content-Length must be a number of bytes, not {given[:40]!r}")
    length = int(given)
    if length > len(body):
        raise refused(f"Inference-Header-Content-Length is {length}, beyond the body's {len(body)} bytes")
    return body[:length], memoryview(body)[length:]


def parse(header: bytes, binary: bool) -> InferBody:
    """The request's JSON, strictly typed; one line naming the first fault."""
    try:
        return InferBody.model_validate_json(header)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        what = "the inference header (the body's first Inference-Header-Content-Length bytes)" if binary else "the body"
        if first["type"] == "json_invalid":
            if "recursion limit" in first["msg"]:
                raise refused(f"{what} nests JSON deeper than {NESTING_LIMIT} levels") from None
            raise refused(f"{what} is not valid JSON: {first['msg'].removeprefix('Invalid JSON: ')}") from None
        raise refused(f"{where}: {first['msg']}" if where else f"{what} must be a JSON object") from None


def flat(data: list[Any], rank: int, name: str) -> list[Any]:
    """A tensor's values in row-major order, from a flat list or one nested up to its rank."""
    for _ in range(rank - 1):
        if not data or not isinstance(data[0], list):
            break
        if not all(isinstance(row, list) for row in data):
            raise refused(f"input '{name}': data mixes lists and values at one level")
        data = [value for row in data for value in row]
    return data


def elements(shape: list[int], name: str) -> int:
    if any(d < 0 for d in shape):
        raise refused(f"input '{name}': shape {shape} has a negative dimension")
    return int(np.prod(shape, dtype=np.int64))


def json_bytes(tensor: Input) -> bytes:
    """An input's JSON values as the bytes gRPC carries: little-endian values, or BYTES' length-prefixed strings."""
    name, values = tensor.name, flat(tensor.data or [], len(tensor.shape), tensor.name)
    count = elements(tensor.shape, name)
    if len(values) != count:
        raise refused(f"input '{name}': shape {tensor.shape} holds {count} values, data has {len(values)}")
    if tensor.datatype == "BYTES":
        if not all(isinstance(v, str) for v in values):
            raise refused(f"input '{name}': BYTES data must be strings")
        try:
            encoded = [v.encode() for v in values]
        except UnicodeEncodeError:
            raise refused(f"input '{name}': a string is not valid UTF-8 (a lone surrogate)") from None
        return b"".join(len(v).to_bytes(4, "little") + v for v in encoded)
    if tensor.datatype == "BF16":
        raise refused(f"input '{name}': BF16 values travel as binary data (binary_data_size), not JSON")
    array = np.array(values) if values else np.zeros(0, NUMPY[tensor.datatype])
    kinds = KINDS.get(tensor.datatype, "iu")
    if array.ndim != 1 or (values and array.dtype.kind not in kinds):
        raise refused(f"input '{name}': data must be {tensor.datatype} values nested as the shape {tensor.shape}")
    target = np.dtype(NUMPY[tensor.datatype])
    if target.kind in "iu" and values:
        bounds = np.iinfo(target)
        if int(array.min()) < bounds.min or int(array.max()) > bounds.max:
            raise refused(f"input '{name}': a value is outside {tensor.datatype}'s range")
    return array.astype(target.newbyteorder("<"), copy=False).tobytes()


def contents(body: InferBody, binary: memoryview) -> list[bytes]:
    """Each input's bytes: its JSON values, or its share of the binary data after the JSON, in order."""
    raw, offset = [], 0
    for tensor in body.inputs:
        size = tensor.parameters.get(BINARY_SIZE)
        if size is None:
            if tensor.data is None:
                raise refused(f"input '{tensor.name}' has neither data nor {BINARY_SIZE}")
            raw.append(json_bytes(tensor))
            continue
        if tensor.data is not None:
            raise refused(f"input '{tensor.name}' has both data and {BINARY_SIZE}")
        if type(size) is not int or size < 0 or offset + size > len(binary):
            raise refused(f"input '{tensor.name}': {BINARY_SIZE} {size} is beyond the {len(binary) - offset} bytes "
                          "left after the inference header")
        raw.append(bytes(binary[offset:offset + size]))
        offset += size
    if offset != len(binary):
        raise refused(f"the body holds {len(binary) - offset} bytes after the inference header that no input claims")
    return raw
