"""The front for Triton's HTTP protocol, its pure parts: which paths it owns, what it refuses from the headers and
the body before Triton is asked anything, the bytes an input becomes, and the JSON an answer is written as."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2

from tritonize.api.errors import ApiError
from tritonize.api.kserve import answers, bodies, route

TEXT = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["hello"]}


def body(*inputs: dict, **fields) -> bytes:
    return json.dumps({"inputs": list(inputs or [TEXT]), **fields}).encode()


def refusal(call, *args) -> ApiError:
    with pytest.raises(ApiError) as caught:
        call(*args)
    return caught.value


@pytest.mark.parametrize("path,kind,model,version", [
    ("/v2", "server", "", ""),
    ("/v2/health/live", "live", "", ""),
    ("/v2/health/ready", "ready", "", ""),
    ("/v2/models/m", "model", "m", ""),
    ("/v2/models/m/versions/3", "model", "m", "3"),
    ("/v2/models/m/ready", "model_ready", "m", ""),
    ("/v2/models/m/versions/2/infer", "infer", "m", "2"),
    ("/v2/models/m/config", "config", "m", ""),
])
def test_the_v2_routes_are_the_fronts(path: str, kind: str, model: str, version: str) -> None:
    found = route(path)
    assert (found.kind, found.model, found.version) == (kind, model, version)
    assert found.method == ("POST" if kind == "infer" else "GET")


@pytest.mark.parametrize("path", ["/v2/embed", "/v2/rerank", "/v2/models", "/v2/models/m/stats",
                                  "/v2/repository/index", "/v2/logging", "/v2/models/m/infer/x"])
def test_the_apis_own_v2_routes_and_triton_admin_routes_are_not(path: str) -> None:
    assert route(path) is None


@pytest.mark.parametrize("content_type", [b"application/x-www-form-urlencoded", b"text/plain",
                                          b"multipart/form-data; boundary=x"])
def test_a_form_or_text_body_is_415_from_its_headers(content_type: bytes) -> None:
    refused = bodies.media_refusal({b"content-type": content_type})
    assert refused.status == 415 and "Content-Type: application/json" in refused.message


@pytest.mark.parametrize("headers", [{}, {b"content-type": b"application/json"},
                                     {b"content-type": b"application/octet-stream"},
                                     {b"content-type": b"application/json; charset=utf-8"},
                                     {b"content-encoding": b"gzip"}])
def test_json_binary_and_compressed_bodies_are_taken(headers: dict) -> None:
    assert bodies.media_refusal(headers) is None


def test_an_unknown_encoding_is_415() -> None:
    assert bodies.media_refusal({b"content-encoding": b"br"}).status == 415


def test_a_compressed_body_is_bounded_after_inflating() -> None:
    headers = {b"content-encoding": b"gzip"}
    assert bodies.decoded(gzip.compress(body()), headers, 1024) == body()
    assert refusal(bodies.decoded, gzip.compress(b" " * 10_000), headers, 1024).status == 413
    assert refusal(bodies.decoded, gzip.compress(body())[:-12], headers, 1024).status == 400


@pytest.mark.parametrize("raw,words", [
    (b'{"inputs": [', "the body is not valid JSON: EOF while parsing"),
    (b"[" * 10_000 + b"]" * 10_000, "nests JSON deeper than 200 levels"),
    (b'{"inputs":[{"name":"T","shape":[1],"datatype":"BYTES","data":' + b"[" * 100_000 + b"]" * 100_000 + b"}]}",
     "nests JSON deeper than 200 levels"),
    (b"[1]", "the body must be a JSON object"),
    (b'{"inputs": []}', "inputs: List should have at least 1 item"),
    (body({**TEXT, "shape": ["1", 1]}), "inputs.0.shape.0: Input should be a valid integer"),
    (body({**TEXT, "datatype": "STRING"}), "inputs.0.datatype: Input should be 'BOOL'"),
])
def test_a_malformed_body_is_400_with_one_line(raw: bytes, words: str) -> None:
    refused = refusal(bodies.parse, raw, False)
    assert refused.status == 400 and words in refused.message and "\n" not in refused.message


def test_a_binary_header_shorter_than_its_json_is_400() -> None:
    sent = body()
    header, binary = bodies.split(sent, {bodies.HEADER_LENGTH: str(len(sent) - 10).encode()})
    refused = refusal(bodies.parse, header, True)
    assert refused.status == 400 and refused.message.startswith("the inference header (the body's first")
    assert len(binary) == 10


@pytest.mark.parametrize("length,words", [(b"x12", "must be a number"), (b"99999", "beyond the body's")])
def test_a_binary_header_length_that_cannot_be_is_400(length: bytes, words: str) -> None:
    assert words in refusal(bodies.split, body(), {bodies.HEADER_LENGTH: length}).message


def test_binary_inputs_take_their_bytes_in_order_and_every_byte_is_claimed() -> None:
    a = {"name": "A", "shape": [2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}
    b = {"name": "B", "shape": [1], "datatype": "INT8", "parameters": {"binary_data_size": 1}}
    parsed = bodies.parse(body(a, b), True)
    data = np.array([1.5, -2], "<f4").tobytes() + b"\x07"
    assert bodies.contents(parsed, memoryview(data)) == [data[:8], data[8:]]
    assert "no input claims" in refusal(bodies.contents, parsed, memoryview(data + b"!")).message
    assert "binary_data_size 1 is beyond the 0 bytes" in refusal(bodies.contents, parsed, memoryview(data[:8])).message


@pytest.mark.parametrize("tensor,expected", [
    ({"name": "X", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2.5], [3, 4]]},
     np.array([1, 2.5, 3, 4], "<f4").tobytes()),
    ({"name": "X", "shape": [3], "datatype": "INT64", "data": [1, -2, 3]}, np.array([1, -2, 3], "<i8").tobytes()),
    ({"name": "X", "shape": [2], "datatype": "BOOL", "data": [True, False]}, b"\x01\x00"),
    ({"name": "X", "shape": [2, 1], "datatype": "BYTES", "data": [["hé"], ["b"]]},
     b"\x03\x00\x00\x00h\xc3\xa9\x01\x00\x00\x00b"),
])
def test_json_values_become_the_bytes_grpc_carries(tensor: dict, expected: bytes) -> None:
    assert bodies.contents(bodies.parse(body(tensor), False), memoryview(b"")) == [expected]


@pytest.mark.parametrize("tensor,words", [
    ({"name": "X", "shape": [2, 1], "datatype": "BYTES", "data": ["a"]}, "holds 2 values, data has 1"),
    ({"name": "X", "shape": [1], "datatype": "BYTES", "data": [1]}, "BYTES data must be strings"),
    ({"name": "X", "shape": [2], "datatype": "FP32", "data": ["1", "2"]}, "must be FP32 values"),
    ({"name": "X", "shape": [1], "datatype": "INT32", "data": [1.5]}, "must be INT32 values"),
    ({"name": "X", "shape": [1], "datatype": "INT8", "data": [300]}, "outside INT8's range"),
    ({"name": "X", "shape": [1], "datatype": "BOOL", "data": [1]}, "must be BOOL values"),
    ({"name": "X", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2], 3, 4]}, "mixes lists and values"),
    ({"name": "X", "shape": [-1], "datatype": "FP32", "data": [1]}, "negative dimension"),
    ({"name": "X", "shape": [1], "datatype": "BF16", "data": [1.0]}, "BF16 values travel as binary data"),
    ({"name": "X", "shape": [1], "datatype": "FP32"}, "neither data nor binary_data_size"),
])
def test_values_that_do_not_fit_the_tensor_are_400(tensor: dict, words: str) -> None:
    refused = refusal(bodies.contents, bodies.parse(body(tensor), False), memoryview(b""))
    assert refused.status == 400 and words in refused.message


def test_the_grpc_request_keeps_parameters_less_the_binary_extensions() -> None:
    parsed = bodies.parse(body({**TEXT, "parameters": {"binary_data_size": 9}},
                               parameters={"binary_data_output": True, "priority": 2, "tag": "x"},
                               outputs=[{"name": "embedding", "parameters": {"binary_data": True, "classification": 2}}],
                               id="r1"), True)
    request = answers.infer_request(parsed, "m", "1", [b"\x05\x00\x00\x00hello"])
    assert (request.model_name, request.model_version, request.id) == ("m", "1", "r1")
    assert answers.parameters_of(request.parameters) == {"priority": 2, "tag": "x"}
    assert dict(request.inputs[0].parameters) == {} and list(request.inputs[0].shape) == [1, 1]
    assert answers.parameters_of(request.outputs[0].parameters) == {"classification": 2}


def response() -> service_pb2.ModelInferResponse:
    answer = service_pb2.ModelInferResponse(model_name="m", model_version="1")
    answer.outputs.add(name="embedding", datatype="FP32", shape=[1, 2])
    answer.outputs.add(name="label", datatype="BYTES", shape=[1, 1])
    answer.raw_output_contents.extend([np.array([0.5, -1], "<f4").tobytes(), b"\x02\x00\x00\x00ok"])
    return answer


def test_outputs_are_json_unless_asked_as_binary() -> None:
    written, length = answers.infer_answer(response(), bodies.parse(body(), False))
    assert length is None
    assert json.loads(written)["outputs"] == [
        {"name": "embedding", "datatype": "FP32", "shape": [1, 2], "data": [0.5, -1.0]},
        {"name": "label", "datatype": "BYTES", "shape": [1, 1], "data": ["ok"]}]


def test_binary_outputs_follow_the_json_in_order() -> None:
    asked = bodies.parse(body(outputs=[{"name": "embedding", "parameters": {"binary_data": True}}, {"name": "label"}]),
                         False)
    written, length = answers.infer_answer(response(), asked)
    header = json.loads(written[:length])
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 8}
    assert header["outputs"][1]["data"] == ["ok"]
    assert np.frombuffer(written[length:], "<f4").tolist() == [0.5, -1.0]


def test_a_config_is_written_with_numbers_where_protobuf_writes_strings() -> None:
    config = model_config_pb2.ModelConfig(name="m", max_batch_size=8)
    config.input.add(name="TEXT", data_type=model_config_pb2.TYPE_STRING, dims=[1])
    config.dynamic_batching.max_queue_delay_microseconds = 2000
    config.dynamic_batching.default_queue_policy.max_queue_size = 512
    plain = answers.plain(config)
    assert plain["input"][0]["dims"] == [1] and plain["input"][0]["data_type"] == "TYPE_STRING"
    assert plain["dynamic_batching"]["max_queue_delay_microseconds"] == 2000
    assert plain["dynamic_batching"]["default_queue_policy"]["max_queue_size"] == 512
