"""The local server's tokenizer step and model step as one Python model: raw strings in, the graph's outputs out.

Served: Triton runs a byte-identical copy of this file as the model step's
model.py on the local server (`configs/local.pbtxt`, which the ensemble's
own local config calls instead of the two steps). Two Python steps cost a
batch two shared-memory hand-offs, two scheduler queues and two stubs
competing for the cores; one step costs one of each, and its answers are
the two steps' answers exactly: the same TextEncoder pads each request to
its bucket, and the same OnnxRunner regroups the rows by length. In the
container the two steps stay two, the graph on Triton's onnxruntime backend.

The step pipelines: execute() tokenizes its requests and hands them to a
worker thread, which answers them through their response senders, so Triton
hands the step its next requests while the graph runs. The worker runs
everything handed over since its last run as one batch. The step holds its
own queue bound (`Pipeline`), because Triton's bound would turn off the
dynamic batcher's prefetching and with it the wake-up that Triton 2.51
loses (docs/benchmark.md, "The 500 ms stalls").

The step also returns the tokenizer's tensors that the ensemble passes on
(token counts, the truncated flag, a post step's offsets), as the tokenizer
step would have.
"""

from __future__ import annotations

import json
import os
import threading
import traceback
from collections.abc import Callable

from .batching import ATTENTION_MASK, ENCODING_FIELDS, QUEUE_BOUND, ROW_FIELDS
from .onnx_model import OnnxRunner
from .tokenizer import RequestEncoder, error_response, parameters

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests read `tokenizer_outputs` and run `Pipeline`
    pb_utils = None


def tokenizer_outputs(model_config: dict, graph_inputs: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the tokenizer must produce: the graph's inputs and the tokenizer tensors the step declares as
    outputs; those declared outputs, which the step passes on)."""
    declared = [o["name"] for o in model_config["output"]]
    passed = tuple(n for n in declared if n in ENCODING_FIELDS or n in ROW_FIELDS)
    return tuple(dict.fromkeys([*graph_inputs, *passed])), passed


def queue_full_message(bound: int) -> str:
    """What a request refused by the bound is told: Triton's own words for a full queue, and the bound."""
    return f"Exceeds maximum queue size: {bound} requests already wait for this model; try again later"


class Pipeline:
    """Requests handed over by execute(), run by one worker thread: each run takes everything waiting.

    `bound` caps the requests waiting (handed over, not yet taken by a run);
    execute() asks `room` before it decodes anything, so a full step refuses
    at the cost of a reply. `run` answers its items itself, errors included.
    """

    def __init__(self, run: Callable[[list], None], bound: int = 0, name: str = "one-step-worker"):
        self.run, self.bound = run, bound
        self._waiting: list = []
        self._closed = False
        self._ready = threading.Condition()
        self._worker = threading.Thread(target=self._loop, name=name, daemon=True)
        self._worker.start()

    def room(self, wanted: int) -> int:
        """How many of `wanted` new requests may wait."""
        if not self.bound:
            return wanted
        with self._ready:
            return max(0, min(wanted, self.bound - len(self._waiting)))

    def put(self, items: list) -> None:
        if not items:
            return
        with self._ready:
            if self._closed:
                raise RuntimeError("the step is unloading")
            self._waiting.extend(items)
            self._ready.notify()

    def _loop(self) -> None:
        while True:
            with self._ready:
                while not self._waiting and not self._closed:
                    self._ready.wait()
                if not self._waiting:
                    return
                items, self._waiting = self._waiting, []
            try:
                self.run(items)
            except Exception:  # noqa: BLE001 - `run` answers its items; the worker must outlive any one batch
                traceback.print_exc()

    def close(self, timeout_s: float = 30.0) -> list:
        """Stop taking requests; let the worker finish what waits; what it could not reach (returned) the
        caller answers."""
        with self._ready:
            self._closed = True
            self._ready.notify()
        self._worker.join(timeout_s)
        with self._ready:
            left, self._waiting = self._waiting, []
        return left


class TritonPythonModel:
    """Tokenizes each request as the tokenizer step would, runs the batch as the model step would."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.runner = OnnxRunner.from_config(config, version_dir)
        produced, self.passed = tokenizer_outputs(config, self.runner.input_names)
        self.front = RequestEncoder(config, version_dir, produced)
        self.final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        self.pipeline = Pipeline(self._run, int(parameters(config).get(QUEUE_BOUND, "0")))

    def execute(self, requests):
        admitted = self.pipeline.room(len(requests))
        responses, valid, encoded = self.front.encode(requests[:admitted])
        self.pipeline.put([(requests[i].get_response_sender(), tensors) for i, tensors in zip(valid, encoded)])
        if admitted == len(requests):
            return responses
        self.front.metrics.record({"queue_full": len(requests) - admitted})
        full = queue_full_message(self.pipeline.bound)
        return responses + [error_response(full, "UNAVAILABLE") for _ in requests[admitted:]]

    def _run(self, items: list) -> None:
        """One batch of every request waiting; each answered through its own sender."""
        try:
            results = self.runner.run_grouped([{n: t[n] for n in self.runner.input_names} for _, t in items])
            answers = []
            for (_, tensors), arrays in zip(items, results):
                outputs = [pb_utils.Tensor(n, a) for n, a in zip(self.runner.output_names, arrays)]
                outputs += [pb_utils.Tensor(n, tensors[n]) for n in self.passed]
                answers.append(pb_utils.InferenceResponse(output_tensors=outputs))
        except Exception as exc:  # noqa: BLE001 - every request of the batch gets the error, the worker goes on
            answers = [error_response(f"the model step failed: {exc}", "INTERNAL")] * len(items)
        # Counted before the answers go out: a client that reads the counters after its answer finds its run.
        try:
            self.front.metrics.record({"runs": 1, "run_texts": sum(len(t[ATTENTION_MASK]) for _, t in items)})
        except Exception as exc:  # noqa: BLE001 - a counter must not cost the answers
            pb_utils.Logger.log_warn(f"one step: the graph run was not counted: {exc}")
        for (sender, _), answer in zip(items, answers):
            self._send(sender, answer)

    def _send(self, sender, answer) -> None:
        try:
            sender.send(answer, flags=self.final)
        except Exception as exc:  # noqa: BLE001 - a request cancelled or already answered: the others go on
            pb_utils.Logger.log_warn(f"one step: an answer could not be sent: {exc}")

    def finalize(self):
        for sender, _ in self.pipeline.close():
            self._send(sender, error_response("the model is unloading", "UNAVAILABLE"))
