"""The statistics step of a production ensemble: the graph's outputs in, the same outputs out, counted.

Served: Triton runs a byte-identical copy of this file as the step's model.py. In NVIDIA's container the graph
runs on Triton's onnxruntime backend, where no Python sees what it answers; this step follows it in the
ensemble for the outputs the task's statistics read (statistics.py), and hands them on unchanged, so
that every caller of the ensemble (gRPC, HTTP, the HTTP API) is counted. The ensemble's answer comes out of
this step, so a request that asks for those outputs cannot skip it. The fused variant counts in its one step
and has none.
"""

from __future__ import annotations

from .metrics import StepMetrics
from .statistics import OutputStatistics
from .stub import ServedStep

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: nothing here runs without it
    pb_utils = None


# The parameter that marks the fused variant's copy, which idles: the fused step counts the same series itself, so
# this one declares none (each series is a round trip to the server at load, and one family twice over).
IDLE = "idle"


class TritonPythonModel(ServedStep):
    """Hands each input on as the output of its name, counting the answers' statistics."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        self.names = [i["name"] for i in config["input"]]
        idle = config.get("parameters", {}).get(IDLE, {}).get("string_value") == "1"
        self.metrics = StepMetrics(config["name"], enabled=not idle)
        self.statistics = None if idle else OutputStatistics.of_step(version_dir, self.metrics)
        if self.statistics is not None:
            self.statistics.start(self.names)

    def execute(self, requests):
        tensors = [{n: pb_utils.get_input_tensor_by_name(r, n) for n in self.names} for r in requests]
        # Each input is the output of the same name: handed on as it came, not copied into a new tensor.
        responses = [pb_utils.InferenceResponse(output_tensors=[t[n] for n in self.names]) for t in tensors]
        if self.statistics is not None:
            self.statistics.observe_requests([{n: t[n].as_numpy() for n in self.names} for t in tensors])
        return responses

    def finalize(self):
        self.metrics.close()
