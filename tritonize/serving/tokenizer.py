"""The tokenizer step: raw UTF-8 strings in, token tensors padded to a bucket length out.

Served: Triton runs a byte-identical copy of this file as the step's
model.py, with batching.py beside it. It needs only `tokenizers` and numpy,
never transformers. Tensor names, the tokenizer file, the max length, the
buckets, the pad id and the truncation strategy are read from the model
configuration Triton hands over. A step with two text inputs encodes pairs
(query and document) with the model's own pair template. One batched encode
covers every request of an execute() call; each request is padded to the
smallest bucket that fits its longest text, so requests of one bucket have
equal shapes and the next step can batch them.
"""

from __future__ import annotations

import json
import os

import numpy as np
from tokenizers import Tokenizer

from .batching import ATTENTION_MASK, ENCODING_FIELDS, INPUT_IDS, bucket_for, pad_rows, pad_value, parse_buckets
from .metrics import StepMetrics
from .texts import REJECT, InvalidText, decode, unk_token_id

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests, verification and the benchmark use TextEncoder
    pb_utils = None


def parameters(model_config: dict) -> dict[str, str]:
    """The string parameters of a model configuration, as Triton hands it to a Python model."""
    return {k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}


class TextEncoder:
    """tokenizer.json with the model's max length, and bucketed padding."""

    def __init__(self, tokenizer_file: str, max_length: int, buckets: list[int], pad_id: int, outputs: tuple[str, ...],
                 truncation: str = "longest_first", max_text_bytes: int = 0, long_texts: str = REJECT):
        unknown = [name for name in outputs if name not in ENCODING_FIELDS]
        if unknown:
            raise ValueError(f"cannot produce {unknown}: a tokenizer gives {sorted(ENCODING_FIELDS)}")
        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        # tokenizer.json files often carry their own truncation/padding (e.g. fixed padding to 128): override both.
        # Pairs cut with "only_second" lose words of the document, never of the query.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length, strategy=truncation)
        self.max_length = max_length
        self.buckets = parse_buckets(",".join(map(str, buckets)), max_length)
        self.pad_id = pad_id
        self.outputs = tuple(outputs)
        self.max_text_bytes, self.long_texts = max_text_bytes, long_texts
        self.unk_id = unk_token_id(self.tokenizer)

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str) -> TextEncoder:
        """Everything from the step's configuration: files are found through the version directory."""
        p = parameters(model_config)
        return cls(
            os.path.join(version_dir, p["tokenizer_file"]),
            int(p["max_length"]),
            parse_buckets(p["buckets"]),
            int(p["pad_id"]),
            tuple(o["name"] for o in model_config["output"]),
            p.get("truncation", "longest_first"),
            int(p.get("max_text_bytes", "0")),
            p.get("long_texts", REJECT),
        )

    def bucket(self, length: int) -> int:
        return bucket_for(length, self.buckets)

    def decode(self, raw: np.ndarray, name: str, counts: dict | None = None) -> list[str]:
        """BYTES elements -> str, each within the byte limit (serving/texts.py)."""
        return decode(raw, name, self.max_text_bytes, self.long_texts, counts)

    def encode(self, texts: list, width: int | None = None) -> dict[str, np.ndarray]:
        """One request's texts (or (first, second) pairs) -> its token tensors, padded to one bucket (or to `width`)."""
        return self.encode_many([texts], width)[0]

    def encode_many(self, groups: list[list], width: int | None = None,
                    counts: dict | None = None) -> list[dict[str, np.ndarray]]:
        """Several requests' texts (or pairs) in one batched encode, each request padded to its bucket.

        width=0 pads each request to its own longest text instead of a bucket. With `counts`, adds what the
        step's metrics count: texts, tokens, padded tokens, truncated texts, unknown tokens.
        """
        try:
            encodings = self.tokenizer.encode_batch([t for g in groups for t in g])
        except Exception as exc:  # noqa: BLE001 - the tokenizer's own words (e.g. a query too long to keep)
            raise InvalidText(str(exc)) from None
        results, start = [], 0
        for g in groups:
            rows = encodings[start : start + len(g)]
            start += len(g)
            longest = max(len(e.ids) for e in rows)
            w = width if width else (longest if width == 0 else self.bucket(longest))
            tensors = {
                name: pad_rows([getattr(e, ENCODING_FIELDS[name]) for e in rows], w, pad_value(name, self.pad_id))
                for name in self.outputs
            }
            results.append(tensors)
            if counts is not None:
                self._count(counts, rows, tensors)
        return results

    def _count(self, counts: dict, rows: list, tensors: dict[str, np.ndarray]) -> None:
        """What the step's metrics count for one request, mostly from the padded arrays (cheap)."""
        mask = tensors[ATTENTION_MASK]
        unknown = int(((tensors[INPUT_IDS] == self.unk_id) & (mask == 1)).sum()) if self.unk_id is not None else 0
        for key, value in (("texts", len(rows)), ("tokens", int(mask.sum())), ("padded", int(mask.size)),
                           ("truncated", sum(1 for e in rows if e.overflowing)), ("unknown", unknown)):
            counts[key] = counts.get(key, 0) + value

    def rows(self, inputs: dict[str, np.ndarray], names: list[str], counts: dict | None = None) -> list:
        """One request's inputs -> texts, or (first, second) pairs when the step has two inputs."""
        columns = [self.decode(inputs[name], name, counts) for name in names]
        if len(columns) == 1:
            return columns[0]
        if len({len(c) for c in columns}) != 1:
            raise InvalidText(f"{' and '.join(names)} must hold the same number of rows, got {[len(c) for c in columns]}",
                              "rows_mismatch")
        return list(zip(*columns))


def _error(message: str):
    return pb_utils.InferenceResponse(error=pb_utils.TritonError(message, pb_utils.TritonError.INVALID_ARG))


class TritonPythonModel:
    """Reads its input names and outputs from the configuration; one error per bad request; counts what it
    tokenized and refused on Triton's metrics port (serving/metrics.py)."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.encoder = TextEncoder.from_config(config, version_dir)
        self.input_names = [i["name"] for i in config["input"]]
        self.metrics = StepMetrics(config["name"])

    def _refuse(self, exc: InvalidText):
        self.metrics.rejected(exc.reason)
        return _error(str(exc))

    def execute(self, requests):
        responses = [None] * len(requests)
        valid, groups, counts = [], [], {}
        for i, request in enumerate(requests):
            inputs = {n: pb_utils.get_input_tensor_by_name(request, n).as_numpy() for n in self.input_names}
            try:
                groups.append(self.encoder.rows(inputs, self.input_names, counts))
                valid.append(i)
            except InvalidText as exc:
                responses[i] = self._refuse(exc)
        try:
            encoded = self.encoder.encode_many(groups, counts=counts) if groups else []
        except InvalidText:
            # One request the tokenizer cannot encode: find it, and answer the others.
            encoded = []
            for i, group in list(zip(valid, groups)):
                try:
                    encoded.append(self.encoder.encode_many([group], counts=counts)[0])
                except InvalidText as exc:
                    responses[i] = self._refuse(exc)
                    valid.remove(i)
        for i, tensors in zip(valid, encoded):
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, arr) for name, arr in tensors.items()]
            )
        self.metrics.record(counts)
        return responses
