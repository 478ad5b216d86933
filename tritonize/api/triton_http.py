"""Triton's inference over its HTTP port (the KServe protocol with binary tensors), on keep-alive connections
whose answers httptools reads.

Why not gRPC for the API's own requests: on a 2-core VM, with 8 requests out at once, grpcio's asyncio client
spent 155 µs of CPU a call of one row and 329 µs of 64 rows, and this one 38 and 124 µs; tritonserver spent
240 and 881 µs answering it here, 317 and 950 µs over gRPC (docs/api.md). The bodies are the ones gRPC carries:
each BYTES element as 4 bytes of length and its bytes, the answer's tensors as their raw bytes.

A connection carries one request at a time; the pool keeps those that answered whole, so it grows to the most
requests out at once and no further. A failure is Triton's status and message, as a TritonFailure under the gRPC
status it stands for (coalesce.RETRIED_ALONE and failures.STATUS read those): Triton's http_server.cc
gives INTERNAL 500, NOT_FOUND 404, UNAVAILABLE 503, UNSUPPORTED 501, and the rest 400.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from urllib.parse import quote

import httptools
import numpy as np
import orjson

from .coalesce import TritonFailure
from .failures import failure_of

# Triton's HTTP status -> the gRPC status its error code has (400 may be UNKNOWN too: both are sent again alone)
GRPC_STATUS = {400: "StatusCode.INVALID_ARGUMENT", 404: "StatusCode.NOT_FOUND", 500: "StatusCode.INTERNAL",
               501: "StatusCode.UNIMPLEMENTED", 503: "StatusCode.UNAVAILABLE"}
HEADER_LENGTH = b"inference-header-content-length"


class Connection(asyncio.Protocol):
    """One keep-alive connection to Triton: a request written whole, its answer read by httptools."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.answer: asyncio.Future | None = None
        self.header_length = -1
        self.chunks: list[bytes] = []
        self.reusable = True
        self.received = False  # any byte of an answer

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.fail(ConnectionError(f"Triton's answer is not HTTP: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        self.fail(ConnectionError("Triton closed the connection"))

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == HEADER_LENGTH:
            self.header_length = int(value)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        self.reusable = self.reusable and self.parser.should_keep_alive()
        body, self.chunks = b"".join(self.chunks), []
        if self.answer is not None and not self.answer.done():
            self.answer.set_result((self.parser.get_status_code(), self.header_length, body))

    def fail(self, exc: Exception) -> None:
        self.reusable = False
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    def send(self, request: bytes) -> asyncio.Future:
        self.answer = asyncio.get_running_loop().create_future()
        self.header_length, self.chunks, self.received = -1, [], False
        self.transport.write(request)
        return self.answer


class TritonHttp:
    """Inference requests to one Triton's HTTP port."""

    def __init__(self, url: str, timeout_s: float):
        host, _, port = url.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"Triton's HTTP address must be host:port, not {url!r}")
        self.host, self.port, self.timeout_s = host.strip("[]"), int(port), timeout_s
        self._idle: list[Connection] = []

    async def _connection(self) -> tuple[Connection, bool]:
        """A connection, and whether it is new (a kept one may have been closed by Triton since)."""
        while self._idle:
            connection = self._idle.pop()
            if connection.reusable:
                return connection, False
        try:
            _, connection = await asyncio.get_running_loop().create_connection(Connection, self.host, self.port)
        except OSError as exc:
            raise failure_of("StatusCode.UNAVAILABLE", f"failed to connect to {self.host}:{self.port}: "
                                                       f"{exc.strerror or exc}") from None
        return connection, True

    async def infer(self, name: str, inputs: Mapping[str, Sequence[str | bytes]], outputs: Sequence[str],
                    parameters: Mapping[str, str] | None = None) -> dict[str, np.ndarray]:
        """The named outputs for these rows, each input a [rows, 1] BYTES tensor."""
        request = request_bytes(name, inputs, outputs, parameters)
        while True:
            connection, new = await self._connection()
            try:
                status, header_length, body = await self._send(connection, request)
                break
            except ConnectionError as exc:
                if new or connection.received:  # a kept connection Triton closed before reading: on another
                    raise failure_of("StatusCode.UNAVAILABLE", str(exc)) from None
        if connection.reusable:
            self._idle.append(connection)
        else:
            connection.transport.close()
        if status != 200:
            raise refusal(status, body)
        return read_answer(header_length, body, outputs)

    async def _send(self, connection: Connection, request: bytes) -> tuple[int, int, bytes]:
        timer = asyncio.get_running_loop().call_later(self.timeout_s, connection.fail, TimeoutError())
        try:
            return await connection.send(request)
        except TimeoutError:
            raise failure_of("StatusCode.DEADLINE_EXCEEDED", "Deadline Exceeded") from None
        except asyncio.CancelledError:
            connection.fail(ConnectionError("the request was cancelled"))  # its answer would reach the next one
            raise
        finally:
            timer.cancel()

    def close(self) -> None:
        for connection in self._idle:
            if connection.transport is not None:
                connection.transport.close()
        self._idle.clear()


def request_bytes(name: str, inputs: Mapping[str, Sequence[str | bytes]], outputs: Sequence[str],
                  parameters: Mapping[str, str] | None = None) -> bytes:
    """The whole HTTP request: its JSON header, then each input's elements (4 bytes of length, little-endian,
    and the bytes, as Triton reads BYTES), every output asked as binary."""
    raws = []
    described = []
    for input_name, column in inputs.items():
        raw = bytes_tensor(column)
        raws.append(raw)
        described.append({"name": input_name, "shape": [len(column), 1], "datatype": "BYTES",
                          "parameters": {"binary_data_size": len(raw)}})
    header = {"inputs": described, "outputs": [{"name": o, "parameters": {"binary_data": True}} for o in outputs]}
    if parameters:
        header["parameters"] = dict(parameters)
    head = orjson.dumps(header)
    length = len(head) + sum(map(len, raws))
    return b"".join((b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: triton\r\nContent-Type: application/octet-stream\r\n"
                     b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                     % (quote(name, safe="").encode(), len(head), length), head, *raws))


def bytes_tensor(column: Sequence[str | bytes]) -> bytes:
    """A BYTES tensor's contents as Triton reads them, over gRPC or HTTP: each element's length in 4 bytes
    (little-endian), then its bytes (a text's UTF-8)."""
    elements = [x.encode("utf-8") if isinstance(x, str) else bytes(x) for x in column]
    return b"".join(len(x).to_bytes(4, "little") + x for x in elements)


def read_answer(header_length: int, body: bytes, outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The named outputs of Triton's answer as arrays of their shapes: each described in the JSON header, its
    bytes after the header in the header's order (or, for one Triton sent as JSON, its `data`)."""
    from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

    header = orjson.loads(body[:header_length] if header_length >= 0 else body)
    found, offset = {}, max(header_length, 0)
    for output in header.get("outputs", ()):
        shape, datatype = tuple(output["shape"]), output["datatype"]
        size = (output.get("parameters") or {}).get("binary_data_size")
        if size is None:
            values = np.array(output.get("data", ()), dtype=triton_to_np_dtype(datatype))
        else:
            raw = body[offset:offset + size]
            offset += size
            values = (deserialize_bytes_tensor(raw) if datatype == "BYTES"
                      else np.frombuffer(raw, triton_to_np_dtype(datatype)))
        found[output["name"]] = values.reshape(shape)
    missing = [name for name in outputs if name not in found]
    if missing:
        raise TritonFailure(424, f"Triton's answer holds no output {missing[0]!r}")
    return {name: found[name] for name in outputs}


def refusal(status: int, body: bytes) -> TritonFailure:
    """Triton's refusal (`{"error": message}`) under the gRPC status its code has."""
    try:
        message = str(orjson.loads(body).get("error") or "")
    except (orjson.JSONDecodeError, AttributeError):
        message = body[:200].decode("utf-8", "replace")
    return failure_of(GRPC_STATUS.get(status, "StatusCode.UNKNOWN"), message or f"HTTP {status}")
