"""Between the HTTP protocol's JSON and Triton's gRPC messages: the request a checked body becomes, and the answers
written back as Triton's HTTP port writes them (binary outputs after the JSON, int64 values as numbers)."""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from tritonclient.grpc import service_pb2

from .bodies import BINARY_SIZE, NUMPY, InferBody, Scalar

BINARY_OUTPUT = "binary_data_output"  # the request's default for every output
BINARY_DATA = "binary_data"  # an output's own choice
INTEGERS = (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_FIXED64, FieldDescriptor.TYPE_SFIXED64)


def set_parameter(target: service_pb2.InferParameter, value: Scalar) -> None:
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = value


def parameters_of(given) -> dict[str, Scalar]:
    """gRPC's parameters as JSON values."""
    return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in given.items() if v.WhichOneof("parameter_choice")}


def infer_request(body: InferBody, model: str, version: str, raw: list[bytes]) -> service_pb2.ModelInferRequest:
    """The gRPC request: the same inputs, outputs and parameters, less the binary extension's own."""
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=body.id or "")
    for key, value in body.parameters.items():
        if key != BINARY_OUTPUT:
            set_parameter(request.parameters[key], value)
    for tensor in body.inputs:
        sent = request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        for key, value in tensor.parameters.items():
            if key != BINARY_SIZE:
                set_parameter(sent.parameters[key], value)
    request.raw_input_contents.extend(raw)
    for output in body.outputs or ():
        asked = request.outputs.add(name=output.name)
        for key, value in output.parameters.items():
            if key != BINARY_DATA:
                set_parameter(asked.parameters[key], value)
    return request


def json_values(raw: bytes, datatype: str) -> Any:
    """An output's bytes as JSON values (flat, row-major), as Triton's HTTP port writes them."""
    if datatype == "BYTES":
        values, offset = [], 0
        while offset < len(raw):
            size = int.from_bytes(raw[offset:offset + 4], "little")
            values.append(raw[offset + 4:offset + 4 + size].decode("utf-8", "replace"))
            offset += 4 + size
        return values
    if datatype == "BF16":
        return (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    array = np.frombuffer(raw, np.dtype(NUMPY[datatype]).newbyteorder("<"))
    return array.astype(np.float32) if datatype == "FP16" else array


def infer_answer(response: service_pb2.ModelInferResponse, body: InferBody) -> tuple[bytes, int | None]:
    """The answer's bytes, and where binary outputs follow the JSON, the JSON's length (its header's value)."""
    binary = {o.name: bool(o.parameters.get(BINARY_DATA, False)) for o in body.outputs or ()}
    default = bool(body.parameters.get(BINARY_OUTPUT, False))
    outputs, tail = [], []
    for index, output in enumerate(response.outputs):
        raw = response.raw_output_contents[index] if index < len(response.raw_output_contents) else b""
        entry: dict[str, Any] = {"name": output.name, "datatype": output.datatype, "shape": list(output.shape)}
        parameters = parameters_of(output.parameters)
        if binary.get(output.name, default):
            entry["parameters"] = {**parameters, BINARY_SIZE: len(raw)}
            tail.append(raw)
        else:
            if parameters:
                entry["parameters"] = parameters
            entry["data"] = json_values(raw, output.datatype)
        outputs.append(entry)
    header: dict[str, Any] = {"model_name": response.model_name, "model_version": response.model_version}
    if response.id:
        header["id"] = response.id
    if response.parameters:
        header["parameters"] = parameters_of(response.parameters)
    header["outputs"] = outputs
    written = orjson.dumps(header, option=orjson.OPT_SERIALIZE_NUMPY)
    return (written + b"".join(tail), len(written)) if tail else (written, None)


def server_metadata(response) -> dict[str, Any]:
    return {"name": response.name, "version": response.version, "extensions": list(response.extensions)}


def model_metadata(response) -> dict[str, Any]:
    def tensors(found) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in found]

    return {"name": response.name, "versions": list(response.versions), "platform": response.platform,
            "inputs": tensors(response.inputs), "outputs": tensors(response.outputs)}


def plain(message) -> dict[str, Any]:
    """A message as Triton's HTTP port writes it: field names as declared, defaults included, 64-bit integers as
    numbers (protobuf's JSON mapping writes them as strings)."""
    return _numbers(message.DESCRIPTOR, json_format.MessageToDict(
        message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True))


def _numbers(descriptor, value: dict[str, Any]) -> dict[str, Any]:
    for field in descriptor.fields:
        if field.name not in value:
            continue
        if field.type in INTEGERS:
            found = value[field.name]
            value[field.name] = [int(v) for v in found] if isinstance(found, list) else int(found)
        elif field.message_type is not None:
            found = value[field.name]
            entry = field.message_type
            if entry.GetOptions().map_entry:
                values = entry.fields_by_name["value"]
                if values.message_type is not None:
                    value[field.name] = {k: _numbers(values.message_type, v) for k, v in found.items()}
                elif values.type in INTEGERS:
                    value[field.name] = {k: int(v) for k, v in found.items()}
            elif isinstance(found, list):
                value[field.name] = [_numbers(entry, v) if isinstance(v, dict) else v for v in found]
            elif isinstance(found, dict):
                value[field.name] = _numbers(entry, found)
    return value
