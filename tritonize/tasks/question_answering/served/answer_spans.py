"""The question-answering pipeline's second half, as served: the model's start and end logits for every window
of one pair -> its answers (question_answering.py says how it matches transformers' pipeline). Copied verbatim
beside the step's model.py: the standard library and numpy only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

DEFAULT_MAX_ANSWER_LEN = 15
DEFAULT_TOP_K = 1
DEFAULT_HANDLE_IMPOSSIBLE_ANSWER = False
DEFAULT_ALIGN_TO_WORDS = True
_NULL_SCORE_START = 1000000.0  # "large and positive", as the pipeline starts min_null_score
_MASKED_LOGIT = -10000.0  # what the pipeline writes over logits that cannot be part of an answer


def _decode_spans(
    start: np.ndarray, end: np.ndarray, topk: int, max_answer_len: int, undesired_tokens: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pipeline's `decode_spans`: best (start, end) token pairs by start_prob * end_prob.

    Kept operation for operation (shapes [1, L], argmax/argpartition on the
    flattened outer product) so that ties resolve as in the pipeline.
    """
    outer = np.matmul(np.expand_dims(start, -1), np.expand_dims(end, 1))
    # Only end >= start and end - start < max_answer_len.
    candidates = np.tril(np.triu(outer), max_answer_len - 1)
    scores_flat = candidates.flatten()
    if topk == 1:
        idx_sort = [np.argmax(scores_flat)]
    elif len(scores_flat) <= topk:
        idx_sort = np.argsort(-scores_flat)
    else:
        idx = np.argpartition(-scores_flat, topk)[0:topk]
        idx_sort = idx[np.argsort(-scores_flat[idx])]
    starts, ends = np.unravel_index(idx_sort, candidates.shape)[1:]
    # As in the pipeline, `nonzero()` of the [1, L] mask also yields row indices (0): token 0 always passes.
    allowed = undesired_tokens.nonzero()
    desired = np.isin(starts, allowed) & np.isin(ends, allowed)
    starts = starts[desired]
    ends = ends[desired]
    return starts, ends, candidates[0, starts, ends]


def _select_starts_ends(
    start: np.ndarray,
    end: np.ndarray,
    p_mask: np.ndarray,
    attention_mask: np.ndarray,
    min_null_score: float,
    top_k: int,
    handle_impossible_answer: bool,
    max_answer_len: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """The pipeline's `select_starts_ends` for one window ([1, L] arrays): mask, softmax, then spans."""
    undesired_tokens = np.abs(p_mask - 1) & attention_mask  # 1 where a token may be in the answer
    undesired_tokens_mask = undesired_tokens == 0.0
    start = np.where(undesired_tokens_mask, _MASKED_LOGIT, start)
    end = np.where(undesired_tokens_mask, _MASKED_LOGIT, end)
    start = np.exp(start - start.max(axis=-1, keepdims=True))
    start = start / start.sum()
    end = np.exp(end - end.max(axis=-1, keepdims=True))
    end = end / end.sum()
    if handle_impossible_answer:
        min_null_score = min(min_null_score, (start[0, 0] * end[0, 0]).item())
    start[0, 0] = end[0, 0] = 0.0  # CLS is never a span
    starts, ends, scores = _decode_spans(start, end, top_k, max_answer_len, undesired_tokens)
    return starts, ends, scores, min_null_score


def _word_to_chars(
    offsets: list[tuple[int, int]], word_ids: list[int], sequence_ids: list[int], word: int, sequence_index: int
) -> tuple[int, int] | None:
    """tokenizers' `Encoding.word_to_chars`: the span from the word's first to last token in this window."""
    in_sequence = [i for i, s in enumerate(sequence_ids) if s == sequence_index]
    if in_sequence:
        lo, hi = in_sequence[0], in_sequence[-1] + 1
    elif all(s == -1 for s in sequence_ids):
        lo, hi = 0, len(sequence_ids)  # no sequence ranges at all: the whole encoding
    else:
        return None
    first = last = None
    for i in range(lo, hi):
        w = word_ids[i]
        if w > word:  # tokenizers stops at the first later word (special tokens, -1, never stop it)
            break
        if w == word:
            if first is None:
                first = i
            last = i
    if first is None:
        return None
    return offsets[first][0], offsets[last][1]


def _get_indices(
    offsets: list[tuple[int, int]],
    word_ids: list[int],
    sequence_ids: list[int],
    s: int,
    e: int,
    sequence_index: int,
    align_to_words: bool,
) -> tuple[int, int]:
    """The pipeline's `get_indices`: whole words where the tokenizer knows them, else token offsets."""
    if align_to_words and 0 <= s < len(word_ids) and 0 <= e < len(word_ids):
        start_word, end_word = word_ids[s], word_ids[e]
        if start_word >= 0 and end_word >= 0:
            start_chars = _word_to_chars(offsets, word_ids, sequence_ids, start_word, sequence_index)
            end_chars = _word_to_chars(offsets, word_ids, sequence_ids, end_word, sequence_index)
            if start_chars is not None and end_chars is not None:
                return start_chars[0], end_chars[1]
    # Python indexing, negative indices included, as the pipeline's fallback does.
    return offsets[s][0], offsets[e][1]


def _as_logits(values: Any, name: str) -> np.ndarray:
    """Logits as float32/float64 [n_windows, L]; narrower floats (fp16, bf16) are widened as the pipeline does."""
    array = np.asarray(values)
    if array.dtype not in (np.float32, np.float64):
        array = array.astype(np.float32)
    if array.ndim == 1:
        array = array[None]
    if array.ndim != 2:
        raise ValueError(f"{name} must have shape [n_windows, length], got {array.shape}")
    return array


def decode_answers(
    context: str,
    start_logits: Any,
    end_logits: Any,
    windows: Mapping[str, Any],
    *,
    top_k: int = DEFAULT_TOP_K,
    max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
    handle_impossible_answer: bool = DEFAULT_HANDLE_IMPOSSIBLE_ANSWER,
    align_to_words: bool = DEFAULT_ALIGN_TO_WORDS,
    question_first: bool = True,
    pad_token_id: int | None = None,
) -> list[dict[str, Any]]:
    """All windows of one (question, context) pair -> the pipeline's answers, best first (at most `top_k`).

    `start_logits`/`end_logits`: [n_windows, L] with L >= every window's
    length (extra columns are ignored); `windows`: the arrays of
    `stack_windows` (right-padded; "attention_mask", "p_mask", "offsets",
    "word_ids", "sequence_ids" are read, "input_ids" only for a context-first
    tokenizer). Answers equal up to case are merged and their scores added,
    across windows too, as in the pipeline. Returns plain python types; an
    empty list where no context token can be an answer.
    """
    if top_k < 1:
        raise ValueError(f"top_k parameter should be >= 1 (got {top_k})")
    if max_answer_len < 1:
        raise ValueError(f"max_answer_len parameter should be >= 1 (got {max_answer_len})")
    starts_all = _as_logits(start_logits, "start_logits")
    ends_all = _as_logits(end_logits, "end_logits")
    attention = np.asarray(windows["attention_mask"], dtype=np.int64)
    if attention.ndim == 1:
        attention = attention[None]
    if attention.ndim != 2 or attention.shape[0] != starts_all.shape[0]:
        raise ValueError(f"windows have attention_mask {attention.shape}, the logits {starts_all.shape}")
    p_masks = np.asarray(windows["p_mask"], dtype=np.int64).reshape(attention.shape)
    offsets_all = np.asarray(windows["offsets"], dtype=np.int64).reshape(attention.shape + (2,))
    word_ids_all = np.asarray(windows["word_ids"], dtype=np.int64).reshape(attention.shape)
    sequence_ids_all = np.asarray(windows["sequence_ids"], dtype=np.int64).reshape(attention.shape)
    if ends_all.shape[0] != starts_all.shape[0]:
        raise ValueError(f"start_logits has {starts_all.shape[0]} windows, end_logits {ends_all.shape[0]}")

    pre_topk = top_k * 2 + 10 if align_to_words else top_k  # some candidates merge once aligned to words
    sequence_index = 1 if question_first else 0
    min_null_score = _NULL_SCORE_START
    answers: list[dict[str, Any]] = []
    for w in range(attention.shape[0]):
        length = int(attention[w].sum())  # windows are unpadded in the pipeline: drop the served padding
        if starts_all.shape[1] < length or ends_all.shape[1] < length:
            raise ValueError(f"window {w} has {length} tokens but the logits only {starts_all.shape[1]}")
        starts, ends, scores, min_null_score = _select_starts_ends(
            starts_all[w, :length][None],
            ends_all[w, :length][None],
            p_masks[w, :length][None],
            attention[w, :length][None],
            min_null_score,
            pre_topk,
            handle_impossible_answer,
            max_answer_len,
        )
        shift = 0
        if not question_first and pad_token_id is not None:
            # The pipeline's left-padding correction, applied to its unpadded ids.
            ids = np.asarray(windows["input_ids"], dtype=np.int64).reshape(attention.shape)[w, :length]
            shift = int((ids == pad_token_id).sum())
        offsets = [(int(a), int(b)) for a, b in offsets_all[w, :length]]
        word_ids = [int(x) for x in word_ids_all[w, :length]]
        sequence_ids = [int(x) for x in sequence_ids_all[w, :length]]
        for s, e, score in zip(starts, ends, scores):
            start_index, end_index = _get_indices(
                offsets, word_ids, sequence_ids, int(s) - shift, int(e) - shift, sequence_index, align_to_words
            )
            text = context[start_index:end_index]
            same = next((a for a in answers if a["answer"].lower() == text.lower()), None)
            if same is not None:
                same["score"] += score.item()
            else:
                answers.append({"score": score.item(), "start": start_index, "end": end_index, "answer": text})
    if handle_impossible_answer:
        answers.append({"score": float(min_null_score), "start": 0, "end": 0, "answer": ""})
    return sorted(answers, key=lambda a: a["score"], reverse=True)[:top_k]


def decode_answer(
    context: str,
    start_logits: Any,
    end_logits: Any,
    windows: Mapping[str, Any],
    *,
    max_answer_len: int = DEFAULT_MAX_ANSWER_LEN,
    handle_impossible_answer: bool = DEFAULT_HANDLE_IMPOSSIBLE_ANSWER,
    align_to_words: bool = DEFAULT_ALIGN_TO_WORDS,
    question_first: bool = True,
    pad_token_id: int | None = None,
) -> dict[str, Any] | None:
    """The pipeline's single answer (top_k=1): `{"score", "start", "end", "answer"}`, or None where it returns []."""
    answers = decode_answers(
        context,
        start_logits,
        end_logits,
        windows,
        top_k=1,
        max_answer_len=max_answer_len,
        handle_impossible_answer=handle_impossible_answer,
        align_to_words=align_to_words,
        question_first=question_first,
        pad_token_id=pad_token_id,
    )
    return answers[0] if answers else None
