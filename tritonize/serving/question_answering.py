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
from dataclasses import dataclass
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .metrics import StepMetrics
from .statistics import OutputStatistics
from .texts import InvalidText, check_size, decode
from .stub import check_tensor_exchange

try:
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported outside Triton: tests, verification and the benchmark's floor use Reader
    pb_utils = None

PIPELINE_MAX_SEQ_LEN = 384  # the pipeline never uses more, whatever the model allows
PIPELINE_MAX_DOC_STRIDE = 128
DEFAULT_MAX_ANSWER_LEN = 15
DEFAULT_TOP_K = 1
DEFAULT_HANDLE_IMPOSSIBLE_ANSWER = False
DEFAULT_ALIGN_TO_WORDS = True
_NULL_SCORE_START = 1000000.0  # "large and positive", as the pipeline starts min_null_score
_MASKED_LOGIT = -10000.0  # what the pipeline writes over logits that cannot be part of an answer

# The model's inputs among the arrays `stack_windows` returns.
MODEL_INPUT_KEYS = ("input_ids", "attention_mask", "token_type_ids")


# --- defaults ---------------------------------------------------------------


def default_max_seq_len(model_max_length: int) -> int:
    """The pipeline's window length: the model's max length, capped at 384."""
    return min(int(model_max_length), PIPELINE_MAX_SEQ_LEN)


def default_doc_stride(max_seq_len: int) -> int:
    """The pipeline's overlap between windows: half a window, capped at 128."""
    return min(int(max_seq_len) // 2, PIPELINE_MAX_DOC_STRIDE)


# --- 1. tokenizing ----------------------------------------------------------


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


# --- 2. decoding ------------------------------------------------------------


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


# --- 3. the served step -------------------------------------------------------


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


class TritonPythonModel:
    """Triton's side of Reader: the windows of every request of an execute() go to the model step in one
    call (business logic scripting, so they batch there with other work); one error per bad request."""

    def initialize(self, args):
        check_tensor_exchange()  # refuse to load on a stub that would corrupt tensors
        config = json.loads(args["model_config"])
        self.reader = Reader.from_config(config, os.path.join(args["model_repository"], args["model_version"]))
        # The model step of this step's own version: while a server switches versions both are loaded, and
        # a request must not mix them.
        self.version = int(args["model_version"])
        self.input_names = [i["name"] for i in config["input"]]
        self.output_name = config["output"][0]["name"]
        self.metrics = StepMetrics(config["name"])
        self.statistics = OutputStatistics.of_step(os.path.join(args["model_repository"], args["model_version"]),
                                                   self.metrics)
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
