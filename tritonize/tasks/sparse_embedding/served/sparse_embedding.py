"""Sparse (SPLADE) embeddings, served as the step after the model: each text's non-zero terms, compact.

The graph returns one weight per vocabulary entry and text (SpladePooling: log(1 + ReLU) of the masked-LM logits,
max or sum over the tokens), a row as wide as the vocabulary (30,522 for BERT) in which a trained SPLADE model
leaves a few hundred entries non-zero. This step keeps those entries and nothing else:

* ``indices`` INT32 ``[N, K]``: each text's non-zero vocabulary ids, ascending (the order of a coalesced
  sparse tensor, as ``SparseEncoder.encode`` returns it);
* ``values`` FP32 ``[N, K]``: their weights, in the same order;
* ``K`` is the longest row of the request; shorter rows end in ``PAD_INDEX`` (-1) with value 0.

Why two padded tensors, not one JSON document per text: over gRPC (and HTTP's binary extension) each is one
contiguous buffer a client reads with a single numpy view, and over plain JSON they are two flat number
arrays; a JSON cell would make every client and the HTTP API parse text once per text (and HTTP would carry
it as an escaped string inside Triton's JSON). A text-embeddings-inference ``/embed_sparse`` answer
(``[{"index", "value"}]`` per text) is a zip of one row's kept entries. Padding costs little: SPLADE rows of
one request have similar counts.

Nothing is pruned beyond what the model declares: with ``max_active_dims`` (config_sentence_transformers.json)
only that many of the largest weights of a row are kept, as ``SparseEncoder.encode`` keeps them (ties at the cut,
which float weights make rare, keep the lower vocabulary id).

Served: copied verbatim next to the post step's model.py; it imports only the standard library and numpy.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .post_step import PostAdapter

PAD_INDEX = -1  # what ends a row shorter than the request's longest
INDICES, VALUES = "indices", "values"


def active(weights: np.ndarray, max_active_dims: int = 0) -> np.ndarray:
    """The vocabulary ids a row keeps, ascending: its non-zero weights, the `max_active_dims` largest by absolute
    value where the model declares a limit (0: none)."""
    kept = np.flatnonzero(weights)
    if max_active_dims and len(kept) > max_active_dims:
        order = np.argsort(-np.abs(weights[kept]), kind="stable")[:max_active_dims]
        kept = np.sort(kept[order])
    return kept


def compact(weights: np.ndarray, max_active_dims: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """[N, vocab] weights -> (indices INT32 [N, K], values FP32 [N, K]), rows padded with PAD_INDEX / 0.
    K is at least 1, so a request whose texts have no active term still has a well-formed shape."""
    rows = [active(w, max_active_dims) for w in weights]
    width = max([1] + [len(r) for r in rows])
    indices = np.full((len(rows), width), PAD_INDEX, dtype=np.int32)
    values = np.zeros((len(rows), width), dtype=np.float32)
    for r, kept in enumerate(rows):
        indices[r, : len(kept)] = kept
        values[r, : len(kept)] = weights[r, kept]
    return indices, values


def rows(indices: np.ndarray, values: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The served arrays back into one (indices, values) pair per text, padding dropped."""
    out = []
    for ids, vals in zip(np.asarray(indices), np.asarray(values)):
        keep = ids != PAD_INDEX
        out.append((ids[keep].astype(np.int32), vals[keep].astype(np.float32)))
    return out


class PostStep:
    """The graph's per-vocabulary weights of a request -> its compact answer. Names and the declared
    max_active_dims come from the configuration."""

    def __init__(self, weights_input: str, max_active_dims: int, output_names: tuple[str, str] = (INDICES, VALUES)):
        self.weights_input, self.max_active_dims = weights_input, max_active_dims
        self.output_names = output_names

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str) -> PostStep:
        p = {k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}
        names = {o["name"] for o in model_config["output"]}
        if names != {INDICES, VALUES}:
            raise ValueError(f"a sparse-embedding post step returns {INDICES} and {VALUES}, not {sorted(names)}")
        return cls(p["weights_input"], int(p.get("max_active_dims", "0")))

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request's inputs, by name -> its outputs, by name."""
        indices, values = compact(np.asarray(inputs[self.weights_input]), self.max_active_dims)
        return {INDICES: indices, VALUES: values}


class TritonPythonModel(PostAdapter):
    """Triton's side of PostStep: reads the input its configuration names, answers each request."""

    def build(self, config: dict, version_dir: str) -> PostStep:
        return PostStep.from_config(config, version_dir)

    def read(self, config: dict) -> list[str]:
        return [self.step.weights_input]
