"""Bucket lookup, padding and length regrouping: the one copy of each.

Served: copied verbatim next to each Python step's model.py, so it imports
only numpy. The tokenizer step, the Python model step, verification and the
benchmark's floor all pad and regroup with these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

# The token tensors a tokenizer step can produce, by their Hugging Face names, and the
# `tokenizers` Encoding field that fills each. Names are read from the model config;
# this says what each name means. The first three feed the model; offsets (character
# spans, [T, 2] per row) and the special-tokens mask feed post-processing steps.
ENCODING_FIELDS = {
    "input_ids": "ids",
    "attention_mask": "attention_mask",
    "token_type_ids": "type_ids",
    "offsets": "offsets",
    "special_tokens_mask": "special_tokens_mask",
}
INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS, OFFSETS, SPECIAL_TOKENS_MASK = ENCODING_FIELDS
# What the tokenizer step also reports per row, up to the ensemble's outputs: the tokens the model reads
# (special tokens included: usage counts without tokenizing twice), and whether the text was cut at the max
# length (an API request's strict `truncate: false`). Each [N, 1].
TOKEN_COUNT, TRUNCATED = "tokens", "truncated"
ROW_FIELDS = (TOKEN_COUNT, TRUNCATED)
# The request parameters with which a request asks the tokenizer step to cut its texts otherwise than at the end
# (serving/tokenizer.py, `Cut`; Triton forwards an ensemble request's parameters to every step): "left" keeps a
# long text's last tokens; a window index per row (comma-separated) makes each row that max-length window of its
# text, each window sharing WINDOW_OVERLAP tokens with the one before it.
TRUNCATION_DIRECTION, WINDOWS, WINDOW_OVERLAP = "truncation_direction", "windows", "window_overlap"
# A per-token mask of the positions whose outputs count: a late-interaction model's scored tokens, which the
# tokenizer step computes per form (serving/multi_vector.py) and the graph reads. Such a row may score positions
# its attention mask leaves out (query expansion), so a row reaches as far as either mask marks.
SCORE_MASK = "score_mask"
ROW_MASKS = (ATTENTION_MASK, SCORE_MASK)
# At most this many tokens (rows x their bucket) in one run of the model, in the Python steps (`length_groups`)
# and in the graph layout's model step (graph_tokenizer/bucketed.py): onnxruntime on one CPU thread ran 64 rows
# of 128 tokens at 24.3 ms a row and 16 rows at 18.3 (all-MiniLM-L6-v2), and goodput under 128 clients rose
# (docs/reliability.md, "Bounded queues"); 64 short rows still run whole.
RUN_TOKENS = 2048
# The configuration parameter with the fused step's own queue bound: requests handed to its worker and not
# yet running (serving/fused_step.py); 0: none.
QUEUE_BOUND = "max_queue_size"
# The parameter with how long, in microseconds, the fused step's worker waits after a run for the clients it
# answered (serving/fused_step.py, `BatchWorker`); 0: it runs what waits at once.
GATHER = "gather_us"
# A step's queue bound counts work, not requests: a row waiting counts its real tokens, and at least this many (a
# short text's: a bound of N was sized for N requests of one short text each), so N such requests fill a bound of
# N x QUEUE_ROW_TOKENS and longer texts fill it sooner, as the graph's time grows with them. At 4 x capacity, 512
# queued requests of 128 tokens waited up to 10.8 s where the budget is about a second (docs/reliability.md).
QUEUE_ROW_TOKENS = 16


def bound_work(max_queue_size: int) -> int:
    """The work a queue bound of `max_queue_size` (QUEUE_BOUND) holds at most: that many requests of one short
    text each (0: no bound)."""
    return max_queue_size * QUEUE_ROW_TOKENS


def queue_work(attention_mask) -> int:
    """The work one request brings to a queue: its rows' real tokens, each at least QUEUE_ROW_TOKENS."""
    lengths = attention_mask.sum(axis=1) if attention_mask.ndim == 2 else attention_mask
    return int(sum(max(int(n), QUEUE_ROW_TOKENS) for n in lengths))


def real_lengths(feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    """Each row's real tokens: up to the last position its masks (ROW_MASKS) mark; a row of none counts as one
    (it still runs)."""
    marked = np.zeros(np.shape(feeds[ATTENTION_MASK]), dtype=bool)
    for name in ROW_MASKS:
        if name in feeds:
            marked |= np.asarray(feeds[name]) != 0
    extent = marked.shape[1] - np.argmax(marked[:, ::-1], axis=1)
    return np.maximum(1, np.where(marked.any(axis=1), extent, 0))


def parse_buckets(text: str, max_length: int | None = None) -> list[int]:
    """"16,32,64" -> sorted lengths; with max_length, capped there and ending there."""
    buckets = sorted({int(b) for b in text.split(",") if b.strip()})
    if max_length is None:
        return buckets
    buckets = [b for b in buckets if b <= max_length] or [max_length]
    if buckets[-1] != max_length:
        buckets.append(max_length)
    return buckets


def bucket_for(length: int, buckets: Sequence[int]) -> int:
    """The smallest bucket that holds `length` tokens (the largest when none does)."""
    for b in buckets:
        if length <= b:
            return b
    return buckets[-1]


def pad_value(name: str, pad_id: int) -> int:
    """Token ids pad with the tokenizer's pad id; masks and segment ids with 0."""
    return pad_id if name == INPUT_IDS else 0


def pad_rows(rows: Sequence[Sequence | np.ndarray], width: int, value: int) -> np.ndarray:
    """Rows of different lengths -> one int64 [len(rows), width, ...] array, right-padded with `value`.

    A row's items may be numbers, or pairs (character offsets): the result then has a trailing axis.
    """
    first = next((row for row in rows if len(row)), None)
    item_shape = np.shape(first[0]) if first is not None else ()
    out = np.full((len(rows), width) + item_shape, value, dtype=np.int64)
    for r, row in enumerate(rows):
        n = min(len(row), width)
        if n:
            out[r, :n] = row[:n]
    return out


def length_groups(lengths: np.ndarray, order: np.ndarray, buckets: Sequence[int], max_rows: int,
                  run_tokens: int = RUN_TOKENS) -> list[np.ndarray]:
    """Row indices sorted by length -> consecutive groups within one bucket, at most max_rows each and at most
    `run_tokens` tokens by the bucket (one row at least; 0: no token bound).

    Each group is then padded only to its own longest row, so little compute
    goes to padding.
    """
    groups, start = [], 0
    while start < len(order):
        limit = bucket_for(int(lengths[order[start]]), buckets)
        most = min(max_rows, max(1, run_tokens // limit)) if run_tokens else max_rows
        stop = start
        while stop < len(order) and stop - start < most and lengths[order[stop]] <= limit:
            stop += 1
        stop = max(stop, start + 1)  # a row longer than every bucket still makes progress, alone
        groups.append(order[start:stop])
        start = stop
    return groups


def costliest_first(groups: list[np.ndarray], lengths: np.ndarray, parts: int) -> list[np.ndarray]:
    """Each group cut into up to `parts` pieces, costliest (rows x width) first.

    Greedy longest-first keeps parallel workers finishing together on mixed
    lengths, where dealing rows out in a fixed pattern left one core waiting.
    """
    pieces = [p for g in groups for p in np.array_split(g, min(parts, len(g)))]
    return sorted(pieces, key=lambda p: len(p) * int(lengths[p].max()), reverse=True)
