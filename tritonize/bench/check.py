"""Before a server is timed, its answers are checked against the floor's: a fast wrong answer is no result.

The floor runs the repository's own steps in-process (`chain.in_process`), so
Triton must answer the same rows with the same outputs: numbers within a
tolerance (batching changes the order of float sums, nothing more), JSON
answers (entities, spans) equal in every field but scores, which get the
same tolerance. The PyTorch peers are checked the same way with a
tolerance for PyTorch against onnxruntime, and their agreement is recorded.
A server that is not ours (Infinity) may scale an embedding differently (it
always normalises), so its embeddings are compared by cosine instead.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

ATOL = 1e-4
TORCH_ATOL = 1e-3  # PyTorch against the exported graph on onnxruntime
ROWS = 8  # checked per workload
MIN_COSINE = 0.999  # an embedding from another server against the floor's


@dataclass
class Check:
    """How many of a workload's first rows a system answered as the floor does."""

    rows: int = 0
    agree: int = 0
    max_abs: float = 0.0
    first_mismatch: str = ""
    min_cosine: float | None = None  # set when compared by cosine

    @property
    def passed(self) -> bool:
        return self.rows > 0 and self.agree == self.rows

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def _cell(value):
    """A BYTES cell as the JSON document it holds (or its text); anything else as it is."""
    if isinstance(value, (bytes, np.bytes_)):
        value = bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def difference(expected, got) -> float | None:
    """The largest absolute difference between two answers' numbers; None when anything else differs."""
    if isinstance(expected, np.ndarray) or isinstance(got, np.ndarray):
        a, b = np.asarray(expected), np.asarray(got)
        if a.shape != b.shape:
            return None
        if a.dtype == object or b.dtype == object:
            diffs = [difference(_cell(x), _cell(y)) for x, y in zip(a.reshape(-1), b.reshape(-1))]
            return None if any(d is None for d in diffs) else max(diffs, default=0.0)
        return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))
    if isinstance(expected, dict) and isinstance(got, dict):
        if set(expected) != set(got):
            return None
        return difference([expected[k] for k in sorted(expected)], [got[k] for k in sorted(got)])
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        if len(expected) != len(got):
            return None
        diffs = [difference(x, y) for x, y in zip(expected, got)]
        return None if any(d is None for d in diffs) else max(diffs, default=0.0)
    if isinstance(expected, bool) or isinstance(got, bool) or expected is None or got is None:
        return 0.0 if expected == got else None
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        if isinstance(expected, int) and isinstance(got, int):  # offsets, indices: exact
            return 0.0 if expected == got else None
        return abs(float(expected) - float(got))
    return 0.0 if expected == got else None


def one_row(outputs: dict[str, np.ndarray]) -> dict:
    """A one-row request's outputs as JSON-able values (what a JSON server answers for the row)."""
    return {name: _cell(a.reshape(-1)[0]) if a.dtype == object else a[0].tolist() for name, a in outputs.items()}


def compare(expected: list[dict], got: list[dict], atol: float = ATOL) -> Check:
    """Per row, every output the floor gives must be in the answer and agree within atol."""
    check = Check(rows=len(expected))
    for i, (e, g) in enumerate(zip(expected, got)):
        missing = [name for name in e if name not in g]
        d = None if missing else difference({k: e[k] for k in e}, {k: g[k] for k in e})
        if d is not None:
            check.max_abs = max(check.max_abs, d)
        if d is not None and d <= atol:
            check.agree += 1
        elif not check.first_mismatch:
            check.first_mismatch = f"row {i}: " + (f"missing {missing}" if missing else
                                                   "differs beyond numbers" if d is None else f"max-abs {d:.2e} > {atol:g}")
    return check


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64).reshape(-1), np.asarray(b, dtype=np.float64).reshape(-1)
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / norms) if norms > 0 else 0.0


def compare_cosine(expected: list[dict], got: list[dict], output: str, minimum: float = MIN_COSINE) -> Check:
    """Per row, the answer's `output` vector must point where the floor's does: cosine at least `minimum`."""
    check = Check(rows=len(expected))
    cosines: list[float] = []
    for i, (e, g) in enumerate(zip(expected, got)):
        want, vector = np.asarray(e[output], dtype=np.float64), g.get(output)
        if vector is None:
            why = g.get("error") or f"no {output!r} in the answer"
        elif np.asarray(vector).size != want.size:
            why = f"{np.asarray(vector).size} numbers, the floor has {want.size}"
        else:
            c = cosine(want, vector)
            cosines.append(c)
            check.max_abs = max(check.max_abs, float(np.max(np.abs(want - np.asarray(vector, dtype=np.float64)))))
            if c >= minimum:
                check.agree += 1
                continue
            why = f"cosine {c:.4f} < {minimum:g}"
        if not check.first_mismatch:
            check.first_mismatch = f"row {i}: {why}"
    check.min_cosine = round(min(cosines), 6) if cosines else 0.0
    return check


def describe(check: dict) -> str:
    """How close the answers were: the smallest cosine, or the largest absolute difference."""
    if check.get("min_cosine") is not None:
        return f"min cosine {check['min_cosine']:.6f}"
    return f"max-abs {check['max_abs']:.1e}"
