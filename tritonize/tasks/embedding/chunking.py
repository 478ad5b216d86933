"""Chunked processing: a text longer than the model reads, embedded whole as max-length windows.

The windows are the served tokenizer's own (`stride` = the overlap: transformers' `return_overflowing_tokens`).
The API counts each text's windows with the tokenizer file the step serves, and sends every window as a row of
one request: the text again, with the `windows` request parameter naming which window each row is, so the
tokenizer step cuts it (serving/tokenizer.py, `Cut`). Each window is embedded as any text is; a text's vector is
the mean of its windows' vectors weighted by the tokens each window holds (special tokens included), normalised
where the model normalises (vLLM's chunked processing pools by the same weights). A text of one window is served
as it would be without chunking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...spec import TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT, WINDOW_OVERLAP, WINDOWS


@dataclass(frozen=True)
class Windows:
    """Each text's windows, as rows of one request and its parameters."""

    counts: tuple[int, ...]  # windows per text
    overlap: int

    @classmethod
    def of(cls, tokenizer, texts: Sequence[str], overlap: int) -> Windows:
        """`tokenizer`: the served tokenizer truncating at the max length with `stride=overlap`."""
        encodings = tokenizer.encode_batch_fast(list(texts))
        return cls(tuple(1 + len(e.overflowing) for e in encodings), overlap)

    def rows(self, texts: Sequence[str]) -> list[tuple[str]]:
        return [(t,) for t, n in zip(texts, self.counts) for _ in range(n)]

    def parameters(self) -> dict:
        return {WINDOWS: [k for n in self.counts for k in range(n)], WINDOW_OVERLAP: str(self.overlap)}

    @property
    def total(self) -> int:
        return sum(self.counts)

    def pool(self, vectors: np.ndarray, tokens: np.ndarray, normalize: bool) -> np.ndarray:
        """Each text's windows' vectors -> one vector: weighted by `tokens` (one count per window), in float64,
        normalised when the model normalises; a text of one window keeps its vector as served."""
        out, start = np.empty((len(self.counts), vectors.shape[1]), dtype=np.float32), 0
        for i, n in enumerate(self.counts):
            rows, weights = vectors[start : start + n], tokens[start : start + n].astype(np.float64)
            start += n
            if n == 1:
                out[i] = rows[0]
                continue
            mean = (rows.astype(np.float64) * weights[:, None]).sum(axis=0) / weights.sum()
            out[i] = mean / max(np.linalg.norm(mean), 1e-12) if normalize else mean
        return out

    def answer(self, answer: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The rows' outputs as one row a text: its tokens summed over its windows, never truncated."""
        ends = np.cumsum(self.counts)[:-1]
        tokens = answer[TOKEN_COUNT_OUTPUT].reshape(-1)
        return {TOKEN_COUNT_OUTPUT: np.array([[int(p.sum())] for p in np.split(tokens, ends)], dtype=np.int32),
                TRUNCATED_OUTPUT: np.zeros((len(self.counts), 1), dtype=bool)}
