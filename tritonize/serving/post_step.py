"""Triton's side of a post step, once for every task that has one: each request's inputs by name go to the
task's step (`build`), each answer is one response, and the answers' output statistics are counted per execute().

Served: copied beside a post step's module (a task's served/sparse_embedding.py, served/token_classification.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from .metrics import StepMetrics
from .statistics import OutputStatistics
from .stub import ServedStep

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests use the steps themselves
    pb_utils = None

Step = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


class PostAdapter(ServedStep):
    """A post step's TritonPythonModel: `build` makes the task's step from the configuration; `read` names the
    inputs it reads (default: every input the configuration declares); `record` counts a step's own metrics
    after each answer."""

    def build(self, config: dict, version_dir: str) -> Step:
        raise NotImplementedError

    def read(self, config: dict) -> list[str]:
        return [i["name"] for i in config["input"]]

    def record(self) -> None:
        """After each answer: the step's own metrics (none by default)."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        self.step = self.build(config, version_dir)
        self.input_names = self.read(config)
        self.metrics = StepMetrics(config["name"])
        self.statistics = OutputStatistics.of_step(version_dir, self.metrics)
        if self.statistics is not None:
            self.statistics.start([o["name"] for o in config["output"]])

    def execute(self, requests):
        responses, answered = [], []
        for request in requests:
            outputs = self.step({n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.input_names})
            self.record()
            answered.append(outputs)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(n, a) for n, a in outputs.items()]))
        if self.statistics is not None:
            self.statistics.observe_requests(answered)
        return responses

    def finalize(self):
        self.metrics.close()
