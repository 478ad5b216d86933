"""Extractive question answering as served, matching transformers' question-answering pipeline.

This file is copied verbatim into a Triton model repository, where tritonize
and transformers are not installed: it imports only the standard library,
numpy and `tokenizers`.

It replicates `QuestionAnsweringPipeline` (transformers 4.x, fast tokenizers;
the task was removed from transformers 5) in two pure halves:

1. Tokenizing (`window_tokenizer`, `tokenize_pair`, `stack_windows`):
   (question, context) -> one window per chunk of the context. As the pipeline
   does, a long context is split into overlapping windows of `max_seq_len`
   tokens with `doc_stride` tokens of overlap, and the question is never
   truncated (`truncation="only_second"`, `return_overflowing_tokens=True`).
   Each window carries what the model needs (input_ids, attention_mask,
   token_type_ids) and what decoding needs (p_mask, character offsets, word
   and sequence ids), so decoding never has to tokenize again.
2. Decoding (`decode_answers`, `decode_answer`): the model's start/end logits
   for all windows of one pair -> `{"score", "start", "end", "answer"}`, with
   the pipeline's masking, softmax, outer product, `max_answer_len`,
   `align_to_words`, merging of equal answers across windows and top-k.

Defaults are the pipeline's: max_seq_len = min(model max length, 384),
doc_stride = min(max_seq_len // 2, 128), max_answer_len = 15, top_k = 1,
handle_impossible_answer = False, align_to_words = True.

Served as one Python step in front of the model step (`TritonPythonModel`, which adapts `Reader` to pb_utils):
each execute() reads every request's QUESTION and CONTEXT rows (a request that cannot be read: over the byte
bound, bad UTF-8, unequal counts, a question too long to window, gets its own error), windows each pair
(`tokenize_pair`), stacks the windows of all its requests into one batch padded to a bucket (`stack_windows`),
sends them to the model step of its own version by business logic scripting (at most the model step's max
batch size per call), and decodes each pair's windows together (`decode_answer`) into one JSON answer per row.
The benchmark's floor and `tritonize stress` run the same `Reader` in-process (chain.py), with the repository's
graph as the model call.

What needs transformers is resolved once, at generation time, by the task (tasks/question_answering/task.py:
the question goes first when the tokenizer pads on the right; its `cls_token_id`; the pipeline's window length
and stride) and reaches `Reader` as the step's config parameters, beside the tokenizer.json transformers itself
tokenizes with (source.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

# The pipeline's two halves; the task's verification and the tests read them through the step's own module.
from .answer_spans import DEFAULT_MAX_ANSWER_LEN, decode_answer, decode_answers  # noqa: F401
from .answer_windows import (  # noqa: F401
    MODEL_INPUT_KEYS,
    Window,
    default_doc_stride,
    default_max_seq_len,
    load_window_tokenizer,
    stack_windows,
    tokenize_pair,
    window_tokenizer,
)
from .metrics import StepMetrics
from .statistics import OutputStatistics
from .texts import InvalidText, check_size, decode
from .stub import ServedStep

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests, verification and the benchmark's floor use Reader
    pb_utils = None

# --- the served step ----------------------------------------------------------


class InvalidPair(InvalidText):
    """A request's question and context cannot be answered together: reported to that request only."""


ModelCall = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class Reader:
    """(question, context) pairs -> one answer each, in Triton and in-process alike.

    Splits contexts into the pipeline's windows, stacks every window of the
    given pairs into one batch (padded to a bucket), has `model` compute
    their start and end logits (at most max_rows windows per call), and
    decodes each pair's windows together. Everything comes from the
    configuration; the model call is the caller's: business logic scripting
    in Triton, the repository's onnxruntime graph in-process.
    """

    def __init__(self, p: Mapping[str, str], version_dir: str):
        self.question_first = p["question_first"] == "1"
        self.tokenizer = load_window_tokenizer(
            os.path.join(version_dir, p["tokenizer_file"]), int(p["max_seq_len"]), int(p["doc_stride"]),
            question_first=self.question_first,
        )
        self.max_seq_len = int(p["max_seq_len"])
        self.cls_token_id = int(p["cls_token_id"]) if p.get("cls_token_id") else None
        self.pad_id = int(p["pad_id"])
        self.max_answer_len = int(p.get("max_answer_len", DEFAULT_MAX_ANSWER_LEN))
        self.buckets = sorted(int(b) for b in p["buckets"].split(","))
        self.model_name = p["model_name"]
        self.model_inputs = p["model_inputs"].split(",")
        self.start_output, self.end_output = p["start_logits"], p["end_logits"]
        self.max_rows = int(p.get("model_max_batch_size", "64"))
        self.question_input, self.context_input = p["question_input"], p["context_input"]
        self.max_request_bytes = int(p.get("max_request_bytes", "0"))

    @classmethod
    def from_config(cls, model_config: Mapping[str, Any], version_dir: str) -> Reader:
        return cls({k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}, version_dir)

    def windows(self, question: str, context: str) -> list[Window]:
        try:
            return tokenize_pair(self.tokenizer, question, context, cls_token_id=self.cls_token_id,
                                 question_first=self.question_first)
        except Exception as exc:  # noqa: BLE001 - the tokenizer's own words (a question too long to keep)
            raise InvalidPair(str(exc)) from None

    def pairs(self, inputs: Mapping[str, np.ndarray]) -> list[tuple[str, list[Window]]]:
        """One request's inputs, by name -> (context, its windows) per row; InvalidText for a bad request (one
        over the byte bound before anything is decoded). Contexts are read whole, in windows, as the pipeline
        reads them."""
        names = (self.question_input, self.context_input)
        check_size((inputs[name] for name in names), self.max_request_bytes)
        questions, contexts = (decode(inputs[name], name) for name in names)
        if len(questions) != len(contexts):
            raise InvalidPair(f"{len(questions)} questions for {len(contexts)} contexts: send one pair per row",
                              "rows_mismatch")
        return [(c, self.windows(q, c)) for q, c in zip(questions, contexts)]

    def answer(self, pairs: Sequence[tuple[str, Sequence[Window]]], model: ModelCall, width: int | None = None,
               counts: dict | None = None) -> list[bytes]:
        """One JSON answer per pair. Windows are padded to the bucket of the longest (to `width`: 0 for the
        longest itself), as the model step receives them. With `counts`, adds what the step's metrics count."""
        flat = [w for _, ws in pairs for w in ws]
        longest = max(len(w) for w in flat)
        if width is None:
            width = next((b for b in self.buckets if b >= longest), longest)
        stacked = stack_windows(flat, self.pad_id, width or longest)
        if counts is not None:
            for key, value in (("texts", len(pairs)), ("windows", len(flat)), ("tokens", sum(len(w) for w in flat)),
                               ("padded", stacked["input_ids"].size), ("truncated", sum(len(ws) > 1 for _, ws in pairs))):
                counts[key] = counts.get(key, 0) + value
        start, end = [], []
        for lo in range(0, len(flat), self.max_rows):
            out = model({n: stacked[n][lo : lo + self.max_rows] for n in self.model_inputs})
            start.append(out[self.start_output])
            end.append(out[self.end_output])
        start_logits, end_logits = np.concatenate(start), np.concatenate(end)
        answers, row = [], 0
        for context, ws in pairs:
            part = slice(row, row + len(ws))
            row += len(ws)
            found = decode_answer(context, start_logits[part], end_logits[part], {k: v[part] for k, v in stacked.items()},
                                  max_answer_len=self.max_answer_len, question_first=self.question_first,
                                  pad_token_id=self.pad_id)
            answers.append(json.dumps(found, ensure_ascii=False).encode("utf-8"))
        return answers


class TritonPythonModel(ServedStep):
    """Triton's side of Reader: the windows of every request of an execute() go to the model step in one
    call (business logic scripting, so they batch there with other work); one error per bad request."""

    def load(self, config: dict, version_dir: str, args: dict) -> None:
        self.reader = Reader.from_config(config, version_dir)
        # The model step of this step's own version: while a server switches versions both are loaded, and
        # a request must not mix them.
        self.version = int(args["model_version"])
        self.input_names = [i["name"] for i in config["input"]]
        self.output_name = config["output"][0]["name"]
        self.metrics = StepMetrics(config["name"])
        self.statistics = OutputStatistics.of_step(version_dir, self.metrics)
        if self.statistics is not None:
            self.statistics.start([self.output_name])

    def _model(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = [self.reader.start_output, self.reader.end_output]
        response = pb_utils.InferenceRequest(
            model_name=self.reader.model_name, inputs=[pb_utils.Tensor(n, a) for n, a in feeds.items()],
            requested_output_names=outputs, model_version=self.version,
        ).exec()
        if response.has_error():
            raise RuntimeError(response.error().message())
        return {n: pb_utils.get_output_tensor_by_name(response, n).as_numpy() for n in outputs}

    def execute(self, requests):
        responses = [None] * len(requests)
        owners, pairs, counts = [], [], {}  # the request of each pair, and the pairs of every valid request, in order
        for i, request in enumerate(requests):
            try:
                found = self.reader.pairs({n: pb_utils.get_input_tensor_by_name(request, n).as_numpy()
                                           for n in self.input_names})
            except InvalidText as exc:
                self.metrics.rejected(exc.reason)
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG))
                continue
            owners += [i] * len(found)
            pairs += found
        if pairs:
            answers: dict[int, list[bytes]] = {}
            cells = self.reader.answer(pairs, self._model, counts=counts)
            for i, cell in zip(owners, cells):
                answers.setdefault(i, []).append(cell)
            if self.statistics is not None:
                self.statistics.observe({self.output_name: np.array(cells, dtype=object)})
            for i, cells in answers.items():
                out = np.array(cells, dtype=object).reshape(-1, 1)
                responses[i] = pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(self.output_name, out)])
        self.metrics.record(counts)
        return responses

    def finalize(self):
        self.metrics.close()
