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
