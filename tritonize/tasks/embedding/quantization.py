"""Quantized embeddings, equal bit for bit to sentence-transformers' `quantize_embeddings` (numpy only: the API
and clients quantize without torch).

int8 and uint8 cut each dimension's range into 256 buckets, so they need that range: a [2, D] array of each
dimension's minimum and maximum over a corpus's embeddings (`ranges_of`). Generation records the ranges of the
served graph's embeddings of a calibration corpus, at the served size and at each declared Matryoshka size (a cut
vector, re-normalised, is not a slice of the full one's ranges), in the model step's version folder beside its
verification report: the ranges belong to that version's graph. binary and ubinary threshold at 0 and pack 8
dimensions per byte; they need no ranges.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PRECISIONS = ("int8", "uint8", "binary", "ubinary")  # what quantize() computes besides float32
RANGED = ("int8", "uint8")  # the precisions that need per-dimension ranges


def ranges_of(vectors: np.ndarray) -> np.ndarray:
    """Each dimension's minimum and maximum over these embeddings, as quantize_embeddings computes them from
    `calibration_embeddings`: [2, D] float32."""
    vectors = np.asarray(vectors, dtype=np.float32)
    return np.vstack((np.min(vectors, axis=0), np.max(vectors, axis=0)))


def quantize(vectors: np.ndarray, precision: str, ranges: np.ndarray | None = None) -> np.ndarray:
    """float32 embeddings [N, D] at `precision`, as quantize_embeddings(vectors, precision, ranges=ranges)
    returns them: int8/uint8 floor each value into its dimension's 256 buckets, values outside the range clipped
    to the first or last; binary/ubinary pack `value > 0` into bytes (binary shifted by -128 into int8)."""
    if precision in RANGED:
        if ranges is None:
            raise ValueError(f"{precision} needs per-dimension ranges")
        ranges = ranges.astype(np.float32, copy=False)
        starts = ranges[0, :]
        steps = (ranges[1, :] - starts) / 255
        steps = np.where(steps == 0, 1, steps)
        buckets = np.clip(np.floor((vectors - starts) / steps), 0, 255)
        return buckets.astype(np.uint8) if precision == "uint8" else (buckets - 128).astype(np.int8)
    if precision == "binary":
        return (np.packbits(vectors > 0, axis=-1) - 128).astype(np.int8)
    if precision == "ubinary":
        return np.packbits(vectors > 0, axis=-1)
    raise ValueError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")


@dataclass(frozen=True)
class Calibration:
    """The ranges a repository records for one model version: from which texts, and per served size."""

    source: str  # which texts: the calibration file's name, or the verification corpus (tasks/task.py)
    texts: int
    ranges: dict[int, np.ndarray]  # size -> [2, size] float32

    def of_size(self, dim: int) -> np.ndarray:
        return self.ranges[dim]

    def label(self, dim: int) -> str:
        """Which ranges quantized a response (its Quantization-Ranges header): size, source, text count and the
        ranges' digest, so a client can tell whether two answers were quantized alike."""
        digest = hashlib.sha256(self.ranges[dim].astype("<f4").tobytes()).hexdigest()[:16]
        return f"dim={dim}; source={self.source}; texts={self.texts}; sha256={digest}"

    def to_dict(self) -> dict[str, Any]:
        # float32 values as Python floats: each converts to float64 exactly and reads back to the same float32.
        return {"source": self.source, "texts": self.texts,
                "ranges": {str(d): r.astype(np.float32).tolist() for d, r in sorted(self.ranges.items(), reverse=True)}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        return cls(str(data["source"]), int(data["texts"]),
                   {int(d): np.asarray(r, dtype=np.float32) for d, r in data["ranges"].items()})

    @classmethod
    def read(cls, path: Path) -> Calibration | None:
        """The recorded ranges, or None where the version has none (generated before ranges were recorded)."""
        return cls.from_dict(json.loads(path.read_text())) if path.is_file() else None
