"""The local server's tokenizer step and model step as one Python model: raw strings in, the graph's outputs out.

Served: Triton runs a byte-identical copy of this file as the model step's
model.py on the local server (`configs/local.pbtxt`, which the ensemble's
own local config calls instead of the two steps). Two Python steps cost a
batch two shared-memory hand-offs, two scheduler queues and two stubs
competing for the cores; one step costs one of each, and its answers are
the two steps' answers exactly: the same TextEncoder pads each request to
its bucket, and the same OnnxRunner regroups the rows by length. In the
container the two steps stay two, the graph on Triton's onnxruntime backend.

The step also returns the tokenizer's tensors that the ensemble passes on
(token counts, the truncated flag, a post step's offsets), as the tokenizer
step would have.
"""

from __future__ import annotations

import json
import os

from .batching import ENCODING_FIELDS, ROW_FIELDS
from .onnx_model import OnnxRunner
from .tokenizer import RequestEncoder

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests read `tokenizer_outputs`
    pb_utils = None


def tokenizer_outputs(model_config: dict, graph_inputs: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the tokenizer must produce: the graph's inputs and the tokenizer tensors the step declares as
    outputs; those declared outputs, which the step passes on)."""
    declared = [o["name"] for o in model_config["output"]]
    passed = tuple(n for n in declared if n in ENCODING_FIELDS or n in ROW_FIELDS)
    return tuple(dict.fromkeys([*graph_inputs, *passed])), passed


class TritonPythonModel:
    """Tokenizes each request as the tokenizer step would, runs the batch as the model step would."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.runner = OnnxRunner.from_config(config, version_dir)
        produced, self.passed = tokenizer_outputs(config, self.runner.input_names)
        self.front = RequestEncoder(config, version_dir, produced)

    def execute(self, requests):
        responses, valid, encoded = self.front.encode(requests)
        if encoded:
            results = self.runner.run_grouped([{n: t[n] for n in self.runner.input_names} for t in encoded])
            for i, tensors, arrays in zip(valid, encoded, results):
                outputs = [pb_utils.Tensor(n, a) for n, a in zip(self.runner.output_names, arrays)]
                outputs += [pb_utils.Tensor(n, tensors[n]) for n in self.passed]
                responses[i] = pb_utils.InferenceResponse(output_tensors=outputs)
        return responses
