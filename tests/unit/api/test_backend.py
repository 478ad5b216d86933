"""The API's own gRPC request and answer reading hold what tritonclient's would: the same request bytes, the same
arrays back."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import InferResult, service_pb2
from tritonclient.grpc._utils import _get_inference_request
from tritonclient.utils import serialize_byte_tensor

from tritonize.api.backend import answer_arrays, model_infer_request
from tritonize.api.errors import ApiError
from tritonize.client import build_request


def test_the_request_is_tritonclients_for_the_same_rows() -> None:
    inputs = {"QUERY": ["q", "q"], "TEXT": ["héllo wörld", b"\x00raw bytes"]}
    outputs, parameters = ["scores", "tokens"], {"truncation_side": "left", "rows": "1,2"}
    tensors, requested = build_request(grpcclient, inputs, outputs, 0)
    theirs = _get_inference_request(model_name="m", inputs=tensors, model_version="", request_id="", outputs=requested,
                                    sequence_id=0, sequence_start=False, sequence_end=False, priority=0, timeout=None,
                                    parameters=parameters)
    ours = model_infer_request("m", inputs, outputs, parameters)
    assert ours == theirs
    sent = np.array([b"h\xc3\xa9llo w\xc3\xb6rld", b"\x00raw bytes"], dtype=object)
    assert ours.raw_input_contents[1] == serialize_byte_tensor(sent).item()


def test_the_answer_reads_as_tritonclients_does() -> None:
    embedding = np.arange(6, dtype=np.float32).reshape(3, 2)
    tokens, labels = np.array([[4], [5], [6]], np.int64), np.array([[b"a"], [b"bc"], [b""]], dtype=object)
    response = service_pb2.ModelInferResponse(model_name="m")
    for name, array, datatype in (("embedding", embedding, "FP32"), ("tokens", tokens, "INT64"),
                                  ("labels", labels, "BYTES")):
        response.outputs.add(name=name, datatype=datatype, shape=array.shape)
        raw = serialize_byte_tensor(array).item() if datatype == "BYTES" else array.tobytes()
        response.raw_output_contents.append(raw)
    ours, theirs = answer_arrays(response, ["labels", "embedding", "tokens"]), InferResult(response)
    for name in ("embedding", "tokens", "labels"):
        assert ours[name].shape == theirs.as_numpy(name).shape and ours[name].dtype == theirs.as_numpy(name).dtype
        assert np.array_equal(ours[name], theirs.as_numpy(name))
    with pytest.raises(ApiError, match="holds no output 'probabilities'"):
        answer_arrays(response, ["probabilities"])


def test_the_http_request_is_tritonclients_for_the_same_rows() -> None:
    import orjson
    import tritonclient.http as httpclient

    from tritonize.api.triton_http import request_bytes

    inputs = {"QUERY": ["q", "q"], "TEXT": ["héllo wörld", b"\x00raw bytes"]}
    outputs, parameters = ["scores", "tokens"], {"truncation_side": "left", "rows": "1,2"}
    tensors, requested = build_request(httpclient, inputs, outputs, 0)
    body, header_length = httpclient.InferenceServerClient.generate_request_body(tensors, requested,
                                                                                  parameters=parameters)
    request = request_bytes("m", inputs, outputs, parameters)
    head, _, ours = request.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v2/models/m/infer HTTP/1.1"
    fields = dict(line.split(b": ", 1) for line in lines[1:])
    ours_length = int(fields[b"Inference-Header-Content-Length"])
    assert int(fields[b"Content-Length"]) == len(ours)
    assert ours[ours_length:] == body[header_length:]  # the same tensor bytes, in the same order
    theirs_header, ours_header = orjson.loads(body[:header_length]), orjson.loads(ours[:ours_length])
    assert ours_header["parameters"] == theirs_header["parameters"]
    assert ours_header["inputs"] == theirs_header["inputs"]
    assert [o["name"] for o in ours_header["outputs"]] == outputs
    assert all(o["parameters"]["binary_data"] is True for o in ours_header["outputs"])


def test_the_http_answer_reads_as_tritonclients_does() -> None:
    import orjson
    from tritonclient.http import InferResult

    from tritonize.api.triton_http import read_answer, refusal

    embedding = np.arange(6, dtype=np.float32).reshape(3, 2)
    tokens, labels = np.array([[4], [5], [6]], np.int64), np.array([[b"a"], [b"bc"], [b""]], dtype=object)
    described, raws = [], []
    for name, array, datatype in (("embedding", embedding, "FP32"), ("tokens", tokens, "INT64"),
                                  ("labels", labels, "BYTES")):
        raw = serialize_byte_tensor(array).item() if datatype == "BYTES" else array.tobytes()
        described.append({"name": name, "datatype": datatype, "shape": list(array.shape),
                          "parameters": {"binary_data_size": len(raw)}})
        raws.append(raw)
    described.append({"name": "truncated", "datatype": "BOOL", "shape": [3, 1], "data": [False, True, False]})
    header = orjson.dumps({"model_name": "m", "model_version": "1", "outputs": described})
    body = header + b"".join(raws)
    ours = read_answer(len(header), body, ["labels", "embedding", "tokens", "truncated"])
    theirs = InferResult.from_response_body(body, header_length=len(header))
    for name in ("embedding", "tokens", "labels", "truncated"):
        assert ours[name].shape == theirs.as_numpy(name).shape and ours[name].dtype == theirs.as_numpy(name).dtype
        assert np.array_equal(ours[name], theirs.as_numpy(name))
    with pytest.raises(ApiError, match="holds no output 'probabilities'"):
        read_answer(len(header), body, ["probabilities"])
    # Triton's refusals keep the statuses they have over gRPC: a full queue, a bad text, a server failing
    busy = refusal(503, b'{"error":"Exceeds maximum queue size"}')
    assert (busy.status, busy.grpc_status) == (429, "StatusCode.UNAVAILABLE")
    assert refusal(503, b'{"error":"Server not ready"}').status == 503
    assert (refusal(400, b'{"error":"unexpected shape"}').status, refusal(404, b'{"error":"no model"}').status) == (422,
                                                                                                             404)
    assert refusal(500, b"not json").message == "Triton: not json"
