"""Triton over one shared gRPC channel (tritonclient's asyncio client), its failures as ApiErrors.

Requests to one ensemble that arrive together go out as one Triton request of many rows (api/coalesce.py), where
every output the ensemble answers has one shape a row (a row's answer is then the same in any batch); a request
with more rows than the ensemble's max batch size is split, and its pieces go out together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import numpy as np

from ..client import split_url
from .catalog import ServedModel
from .coalesce import Coalescer, TritonFailure
from .failures import failure_of
from .triton_http import TritonHttp, bytes_tensor

DEFAULT_TIMEOUT_S = 60.0
# A request's parameters: a string, or one value per row.
Parameters = Mapping[str, "str | Sequence[int]"]


def request_parameters(parameters: Parameters | None, lo: int, hi: int) -> dict[str, str] | None:
    """The parameters of the request holding rows lo:hi."""
    if not parameters:
        return None
    return {k: v if isinstance(v, str) else ",".join(map(str, v[lo:hi])) for k, v in parameters.items()}


def per_row(parameters: Parameters | None) -> bool:
    """Whether a request's parameters hold a value per row (they then travel with those rows alone)."""
    return bool(parameters) and any(not isinstance(v, str) for v in parameters.values())


class TritonBackend:
    """One asyncio gRPC client for the whole process, opened in the app's lifespan; the inferences over Triton's
    HTTP port where its address is given (api/triton_http.py: a third of the CPU a call)."""

    def __init__(self, grpc_url: str, timeout_s: float = DEFAULT_TIMEOUT_S, coalesce: bool = True,
                 http_url: str | None = None):
        self.url, _ = split_url(grpc_url, "grpc")
        self.timeout_s = timeout_s
        self._client = None
        self.http = TritonHttp(split_url(http_url, "http")[0], timeout_s) if http_url else None
        self.coalescer = Coalescer(self._infer_once) if coalesce else None
        self.coalesced: set[str] = set()  # the models whose every output has one shape a row (output_names)

    async def open(self) -> None:
        import tritonclient.grpc.aio as grpcclient

        self._client = grpcclient.InferenceServerClient(self.url)

    async def close(self) -> None:
        if self.coalescer is not None:
            await self.coalescer.close()
        if self._client is not None:
            await self._client.close()
            self._client = None
        if self.http is not None:
            self.http.close()

    async def infer(self, model: ServedModel, inputs: Mapping[str, Sequence[str]],
                    outputs: Sequence[str], ensemble: str | None = None,
                    parameters: Parameters | None = None) -> dict[str, np.ndarray]:
        """The named outputs for every row of `inputs` (equal-length columns), in row order, through the model's
        ensemble (or `ensemble`: a rollout's candidate, which takes and returns the same tensors). `parameters`:
        the request's, which Triton hands every step (a sequence holds one value per row, sent comma-separated
        with the rows it belongs to)."""
        rows = len(next(iter(inputs.values())))
        size = model.max_batch_size
        name = ensemble or model.name
        if rows <= size:
            whole = request_parameters(parameters, 0, rows)
            # A request that fills a batch alone gains nothing from a lane.
            if rows < size and self.coalescer is not None and model.name in self.coalesced and not per_row(parameters):
                return await self.coalescer.infer(name, inputs, outputs, whole, size,
                                                  int(model.manifest.options.max_request_bytes or 0))
            return await self._infer_once(name, inputs, outputs, whole)
        parts = await asyncio.gather(*(
            self._infer_once(name, {k: v[lo:lo + size] for k, v in inputs.items()}, outputs,
                             request_parameters(parameters, lo, lo + size))
            for lo in range(0, rows, size)))
        return {name: np.concatenate([p[name] for p in parts]) for name in outputs}

    async def _infer_once(self, name: str, inputs: Mapping[str, Sequence[str]],
                          outputs: Sequence[str], parameters: dict[str, str] | None = None) -> dict[str, np.ndarray]:
        from tritonclient.utils import InferenceServerException

        if self.http is not None:
            return await self.http.infer(name, inputs, outputs, parameters)
        try:
            response = await self.raw_infer(model_infer_request(name, inputs, outputs, parameters))
        except InferenceServerException as exc:
            raise triton_error(exc) from None
        return answer_arrays(response, outputs)

    @property
    def client(self):
        """The asyncio gRPC client, for Triton's own calls (the v2 routes: api/kserve/); None before open()."""
        return self._client

    async def raw_infer(self, request):
        """A ModelInferRequest sent as built (api/kserve/: a binary tensor's bytes go as they came)."""
        import grpc
        from tritonclient.grpc._utils import get_error_grpc
        from tritonclient.utils import InferenceServerException

        if self._client is None:
            raise InferenceServerException("the API is not connected to Triton", status="StatusCode.UNAVAILABLE")
        try:
            return await self._client._client_stub.ModelInfer(request=request, timeout=self.timeout_s)
        except grpc.RpcError as exc:
            raise get_error_grpc(exc) from None

    async def output_names(self, name: str) -> tuple[str, ...] | None:
        """The ensemble's outputs from its metadata; None when Triton does not answer. Where each has one shape
        a row (no axis but the batch's of variable size), its requests are coalesced."""
        from tritonclient.utils import InferenceServerException

        if self._client is None:
            return None
        try:
            meta = await self._client.get_model_metadata(name, client_timeout=5.0)
        except InferenceServerException:
            return None
        if all(d > 0 for o in meta.outputs for d in list(o.shape)[1:]):
            self.coalesced.add(name)
        else:
            self.coalesced.discard(name)
        return tuple(o.name for o in meta.outputs)


def model_infer_request(name: str, inputs: Mapping[str, Sequence[str | bytes]], outputs: Sequence[str],
                        parameters: Mapping[str, str] | None = None):
    """Triton's gRPC request for these rows, built in one pass: each input a [rows, 1] BYTES tensor of its
    elements, each 4 bytes of length (little-endian) and then its bytes, as Triton reads them. tritonclient's
    InferInput objects and its per-element serializer cost ~90 µs of CPU more per 64-row request here."""
    from tritonclient.grpc import service_pb2

    request = service_pb2.ModelInferRequest(model_name=name)
    for key, value in (parameters or {}).items():
        request.parameters[key].string_param = value
    for input_name, column in inputs.items():
        request.inputs.add(name=input_name, datatype="BYTES", shape=(len(column), 1))
        request.raw_input_contents.append(bytes_tensor(column))
    for output in outputs:
        request.outputs.add(name=output)
    return request


def answer_arrays(response, outputs: Sequence[str]) -> dict[str, np.ndarray]:
    """The named outputs of Triton's answer as arrays of their shapes (tritonclient's own readers of its bytes)."""
    from tritonclient.utils import deserialize_bytes_tensor, triton_to_np_dtype

    found = {o.name: (o, raw) for o, raw in zip(response.outputs, response.raw_output_contents)}
    arrays = {}
    for name in outputs:
        if name not in found:
            raise TritonFailure(424, f"Triton's answer holds no output {name!r}")
        output, raw = found[name]
        values = (deserialize_bytes_tensor(raw) if output.datatype == "BYTES"
                  else np.frombuffer(raw, dtype=triton_to_np_dtype(output.datatype)))
        arrays[name] = values.reshape(tuple(output.shape))
    return arrays


def triton_error(exc) -> TritonFailure:
    """tritonclient's exception as the API's failure (failures.failure_of)."""
    return failure_of(str(exc.status()), exc.message() or str(exc))
