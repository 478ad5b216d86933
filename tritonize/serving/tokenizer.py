"""The tokenizer step: raw UTF-8 strings in, token tensors padded to a bucket length out.

Served: Triton runs a byte-identical copy of this file as the step's
model.py, with batching.py beside it. It needs only `tokenizers` and numpy,
never transformers. Tensor names, the tokenizer file, the max length, the
buckets and the pad id are read from the model configuration Triton hands
over. One batched encode covers every request of an execute() call; each
request is padded to the smallest bucket that fits its longest text, so
requests of one bucket have equal shapes and the next step can batch them.
"""

from __future__ import annotations

import json
import os

import numpy as np
from tokenizers import Tokenizer

from .batching import ENCODING_FIELDS, bucket_for, pad_rows, pad_value, parse_buckets

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests, verification and the benchmark use TextEncoder
    pb_utils = None


class InvalidText(ValueError):
    """A request's text cannot be tokenized: reported to that request only."""


def parameters(model_config: dict) -> dict[str, str]:
    """The string parameters of a model configuration, as Triton hands it to a Python model."""
    return {k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}


class TextEncoder:
    """tokenizer.json with the model's max length, and bucketed padding."""

    def __init__(self, tokenizer_file: str, max_length: int, buckets: list[int], pad_id: int, outputs: tuple[str, ...]):
        unknown = [name for name in outputs if name not in ENCODING_FIELDS]
        if unknown:
            raise ValueError(f"cannot produce {unknown}: a tokenizer gives {sorted(ENCODING_FIELDS)}")
        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        # tokenizer.json files often carry their own truncation/padding (e.g. fixed padding to 128): override both.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length)
        self.max_length = max_length
        self.buckets = parse_buckets(",".join(map(str, buckets)), max_length)
        self.pad_id = pad_id
        self.outputs = tuple(outputs)

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
        )

    def bucket(self, length: int) -> int:
        return bucket_for(length, self.buckets)

    @staticmethod
    def decode(raw: np.ndarray, name: str) -> list[str]:
        """BYTES elements -> str; invalid UTF-8 and empty texts are the caller's error."""
        texts = []
        for i, item in enumerate(raw.reshape(-1)):
            if isinstance(item, str):
                text = item
            else:
                try:
                    text = bytes(item).decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InvalidText(f"{name}[{i}] is not valid UTF-8 (byte {exc.start}): send UTF-8 encoded text") from None
            if not text.strip():
                raise InvalidText(f"{name}[{i}] is empty: send at least one non-blank character")
            texts.append(text)
        if not texts:
            raise InvalidText(f"{name} has no elements")
        return texts

    def encode(self, texts: list[str], width: int | None = None) -> dict[str, np.ndarray]:
        """One request's texts -> its token tensors, padded to one bucket (or to `width`)."""
        return self.encode_many([texts], width)[0]

    def encode_many(self, groups: list[list[str]], width: int | None = None) -> list[dict[str, np.ndarray]]:
        """Several requests' texts in one batched encode, each request padded to its bucket.

        width=0 pads each request to its own longest text instead of a bucket.
        """
        encodings = self.tokenizer.encode_batch([t for g in groups for t in g])
        results, start = [], 0
        for g in groups:
            rows = encodings[start : start + len(g)]
            start += len(g)
            longest = max(len(e.ids) for e in rows)
            w = width if width else (longest if width == 0 else self.bucket(longest))
            results.append({
                name: pad_rows([getattr(e, ENCODING_FIELDS[name]) for e in rows], w, pad_value(name, self.pad_id))
                for name in self.outputs
            })
        return results


class TritonPythonModel:
    """Reads its input name and outputs from the configuration; one error per bad request."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        self.encoder = TextEncoder.from_config(config, version_dir)
        self.input_name = config["input"][0]["name"]

    def execute(self, requests):
        responses = [None] * len(requests)
        valid, groups = [], []
        for i, request in enumerate(requests):
            raw = pb_utils.get_input_tensor_by_name(request, self.input_name).as_numpy()
            try:
                groups.append(self.encoder.decode(raw, self.input_name))
                valid.append(i)
            except InvalidText as exc:
                responses[i] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                )
        for i, tensors in zip(valid, self.encoder.encode_many(groups)) if groups else ():
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor(name, arr) for name, arr in tensors.items()]
            )
        return responses
