"""The question-answering pipeline's first half, as served: (question, context) -> one window per chunk of the
context, each carrying what the model and the decoding need (question_answering.py says how it matches
transformers' pipeline). Copied verbatim beside the step's model.py: the standard library, numpy and `tokenizers`
only."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

PIPELINE_MAX_SEQ_LEN = 384  # the pipeline never uses more, whatever the model allows
PIPELINE_MAX_DOC_STRIDE = 128

# The model's inputs among the arrays `stack_windows` returns.
MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


# --- defaults ---------------------------------------------------------------


def default_max_seq_len(model_max_length: int) -> int:
    """The pipeline's window length: the model's max length, capped at 384."""
    return min(int(model_max_length), PIPELINE_MAX_SEQ_LEN)


def default_doc_stride(max_seq_len: int) -> int:
    """The pipeline's overlap between windows: half a window, capped at 128."""
    return min(int(max_seq_len) // 2, PIPELINE_MAX_DOC_STRIDE)



# --- windows ----------------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """One chunk of (question, context) as the pipeline feeds it to the model, unpadded.

    `p_mask` is 1 for tokens that cannot be in an answer (question, special
    tokens), 0 for context tokens and the CLS token. `sequence_ids` and
    `word_ids` are -1 where the tokenizer has none (special tokens).
    """

    input_ids: list[int]
    attention_mask: list[int]
    token_type_ids: list[int]
    p_mask: list[int]
    offsets: list[tuple[int, int]]
    word_ids: list[int]
    sequence_ids: list[int]

    def __len__(self) -> int:
        return len(self.input_ids)


def window_tokenizer(
    tokenizer: Tokenizer,
    max_seq_len: int,
    doc_stride: int,
    *,
    question_first: bool = True,
    truncation_side: str = "right",
) -> Tokenizer:
    """A copy of `tokenizer` set up as the pipeline calls it: windows of `max_seq_len`, `doc_stride` overlap.

    tokenizer.json files carry their own truncation and padding (often fixed
    padding): both are replaced, as transformers does on every call. Only the
    context is truncated, so the question is never cut. Make it once, at load.
    """
    if doc_stride > max_seq_len:
        raise ValueError(f"`doc_stride` ({doc_stride}) is larger than `max_seq_len` ({max_seq_len})")
    configured = Tokenizer.from_str(tokenizer.to_str())
    configured.no_padding()
    configured.enable_truncation(
        int(max_seq_len),
        stride=int(doc_stride),
        strategy="only_second" if question_first else "only_first",
        direction=truncation_side,
    )
    return configured


def load_window_tokenizer(
    tokenizer_file: str,
    max_seq_len: int,
    doc_stride: int,
    *,
    question_first: bool = True,
    truncation_side: str = "right",
) -> Tokenizer:
    """`window_tokenizer` for a tokenizer.json path."""
    return window_tokenizer(
        Tokenizer.from_file(tokenizer_file),
        max_seq_len,
        doc_stride,
        question_first=question_first,
        truncation_side=truncation_side,
    )



def tokenize_pair(
    tokenizer: Tokenizer,
    question: str,
    context: str,
    *,
    cls_token_id: int | None = None,
    question_first: bool = True,
) -> list[Window]:
    """(question, context) -> the pipeline's windows, from a tokenizer made by `window_tokenizer`.

    The first window is the encoding itself, the others its overflowing
    encodings, in that order, as transformers returns them. Offsets are
    character offsets into `context` for context tokens (into `question` for
    question tokens; (0, 0) for special tokens).
    """
    first, second = (question, context) if question_first else (context, question)
    encoding = tokenizer.encode(first, second)
    windows = []
    for enc in [encoding, *encoding.overflowing]:
        sequence_ids = [-1 if s is None else int(s) for s in enc.sequence_ids]
        # The pipeline: 1 for everything but the context when the question comes first; nothing masked otherwise.
        p_mask = [int(s != 1) if question_first else 0 for s in sequence_ids]
        ids = list(enc.ids)
        if cls_token_id is not None:
            # Kept answerable: some models point at CLS for "no answer".
            for i, token in enumerate(ids):
                if token == cls_token_id:
                    p_mask[i] = 0
        windows.append(
            Window(
                input_ids=ids,
                attention_mask=list(enc.attention_mask),
                token_type_ids=list(enc.type_ids),
                p_mask=p_mask,
                offsets=[(int(a), int(b)) for a, b in enc.offsets],
                word_ids=[-1 if w is None else int(w) for w in enc.word_ids],
                sequence_ids=sequence_ids,
            )
        )
    return windows


def stack_windows(windows: Sequence[Window], pad_token_id: int = 0, length: int | None = None) -> dict[str, np.ndarray]:
    """Windows -> int64 arrays of shape [n_windows, length] ("offsets": [n_windows, length, 2]), right-padded.

    Padding is neutral for decoding: padded positions have attention_mask 0
    and p_mask 1, and each window's real length is its attention_mask sum.
    """
    if not windows:
        raise ValueError("no windows to stack")
    width = max(len(w) for w in windows) if length is None else int(length)
    if any(len(w) > width for w in windows):
        raise ValueError(f"a window is longer than length={width}")
    n = len(windows)
    out = {
        "input_ids": np.full((n, width), pad_token_id, dtype=np.int64),
        "attention_mask": np.zeros((n, width), dtype=np.int64),
        "token_type_ids": np.zeros((n, width), dtype=np.int64),
        "p_mask": np.ones((n, width), dtype=np.int64),
        "offsets": np.zeros((n, width, 2), dtype=np.int64),
        "word_ids": np.full((n, width), -1, dtype=np.int64),
        "sequence_ids": np.full((n, width), -1, dtype=np.int64),
    }
    for r, w in enumerate(windows):
        k = len(w)
        out["input_ids"][r, :k] = w.input_ids
        out["attention_mask"][r, :k] = w.attention_mask
        out["token_type_ids"][r, :k] = w.token_type_ids
        out["p_mask"][r, :k] = w.p_mask
        out["offsets"][r, :k] = np.asarray(w.offsets, dtype=np.int64).reshape(k, 2)
        out["word_ids"][r, :k] = w.word_ids
        out["sequence_ids"][r, :k] = w.sequence_ids
    return out
