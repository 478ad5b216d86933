"""Token classification (NER) post-processing, served as the step after the model.

Turns the logits of one encoded text into the list that transformers'
``pipeline("token-classification")`` returns for it, for every aggregation
strategy (none, simple, first, average, max), so a Triton deployment answers
exactly what the pipeline would.

This file is copied verbatim into a Triton model repository where tritonize
and transformers are not installed: it imports only the standard library,
numpy and ``tokenizers``.

What a served step hands to :func:`entities`, for one text:

* ``text``: the original string, untouched (offsets index into it);
* from the ``tokenizers.Encoding`` of that text (``Tokenizer.from_file
  ("tokenizer.json")`` with truncation at the model's max length and no
  padding): ``ids``, ``offsets`` and ``special_tokens_mask``;
* from the model: its ``logits`` for that text, ``[T, num_labels]`` (extra
  padded rows are dropped);
* ``labels``: ``config.json``'s ``id2label``;
* the strategy name, and the same ``tokenizers.Tokenizer`` (its model and
  decoder turn ids into the pipeline's ``word`` strings).

Texts longer than the model: the pipeline tokenizes with ``truncation=True``
at ``tokenizer.model_max_length``, so by default only the first
``model_max_length`` tokens (special tokens included) are classified and the
rest of the text is silently dropped; nothing is reported for it. A served step
that truncates the encoding the same way gets the same answer from
:func:`entities`. The pipeline's opt-in ``stride=`` mode (overlapping windows)
is reproduced by running :func:`entities` on every window of an encoding with
``overflowing`` windows and merging with :func:`merge_windows`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from .batching import ATTENTION_MASK, INPUT_IDS, OFFSETS, SPECIAL_TOKENS_MASK
from .texts import unk_token_id
from .post_step import PostAdapter


__all__ = ["STRATEGIES", "entities", "merge_windows", "unk_token_id", "label_list", "PostStep", "TritonPythonModel"]

STRATEGIES = ("none", "simple", "first", "average", "max")


def label_list(id2label: Mapping[Any, str] | Sequence[str]) -> list[str]:
    """Turn ``config.json``'s ``id2label`` (string keys once read back from JSON) into a list indexed by label id."""
    if isinstance(id2label, Mapping):
        by_id = {int(k): str(v) for k, v in id2label.items()}
        return [by_id[i] for i in range(len(by_id))]
    return [str(v) for v in id2label]


def _softmax(logits: np.ndarray) -> np.ndarray:
    """The pipeline's softmax, in the pipeline's dtype (float32 unless the model gives float64)."""
    maxes = np.max(logits, axis=-1, keepdims=True)
    shifted_exp = np.exp(logits - maxes)
    return shifted_exp / shifted_exp.sum(axis=-1, keepdims=True)


def _decode(tokenizer: Tokenizer, tokens: list[str]) -> str:
    """``convert_tokens_to_string`` of a fast tokenizer: the backend decoder, or spaces when it has none."""
    decoder = tokenizer.decoder
    return decoder.decode(tokens) if decoder is not None else " ".join(tokens)


def _tag(label: str) -> tuple[str, str]:
    """Split ``B-PER`` into ``("B", "PER")``; labels without a B-/I- prefix count as continuations."""
    if label.startswith("B-"):
        return "B", label[2:]
    if label.startswith("I-"):
        return "I", label[2:]
    return "I", label


def _pre_entities(
    text: str,
    ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    special_mask: Sequence[int],
    scores: np.ndarray,
    tokenizer: Tokenizer,
    unk_id: int | None,
) -> list[dict[str, Any]]:
    """One record per non-special token: raw token string, scores, span, and whether it continues a word.

    Word boundaries follow the pipeline: a tokenizer with a continuing-subword
    prefix (WordPiece ``##``) marks a continuation when the token string and the
    text it covers differ in length; any other tokenizer (byte-level BPE,
    SentencePiece) falls back to "no space just before or at the token start".
    Unknown tokens show the text they cover and always start a word.
    """
    word_aware = bool(getattr(tokenizer.model, "continuing_subword_prefix", None))
    records = []
    for idx, token_scores in enumerate(scores):
        if special_mask[idx]:
            continue
        token_id = int(ids[idx])
        word = tokenizer.id_to_token(token_id)
        start, end = int(offsets[idx][0]), int(offsets[idx][1])
        word_ref = text[start:end]
        if word_aware:
            is_subword = len(word) != len(word_ref)
        else:
            is_subword = start > 0 and " " not in text[start - 1 : start + 1]
        if unk_id is not None and token_id == unk_id:
            word = word_ref
            is_subword = False
        records.append(
            {"word": word, "scores": token_scores, "start": start, "end": end, "index": idx, "is_subword": is_subword}
        )
    return records


def _aggregate_word(group: list[dict[str, Any]], strategy: str, labels: Sequence[str], tokenizer: Tokenizer) -> dict:
    """Give a whole word one label, so its pieces cannot disagree."""
    word = _decode(tokenizer, [t["word"] for t in group])
    if strategy == "first":
        scores = group[0]["scores"]
        idx = scores.argmax()
        score = scores[idx]
    elif strategy == "max":
        scores = max(group, key=lambda t: t["scores"].max())["scores"]
        idx = scores.argmax()
        score = scores[idx]
    else:  # average
        average = np.nanmean(np.stack([t["scores"] for t in group]), axis=0)
        idx = average.argmax()
        score = average[idx]
    start, end = group[0]["start"], group[-1]["end"]
    return {"entity": labels[int(idx)], "score": score, "word": word, "start": start, "end": end}


def _group(group: list[dict[str, Any]], tokenizer: Tokenizer) -> dict[str, Any]:
    """Fuse adjacent tokens (or words) of one entity: mean score, decoded text, first start to last end."""
    return {
        "entity_group": group[0]["entity"].split("-", 1)[-1],
        "score": np.mean(np.nanmean([t["score"] for t in group])),
        "word": _decode(tokenizer, [t["word"] for t in group]),
        "start": group[0]["start"],
        "end": group[-1]["end"],
    }


def _group_entities(items: list[dict[str, Any]], tokenizer: Tokenizer) -> list[dict[str, Any]]:
    """Group runs with the same tag; a ``B-`` always opens a new entity."""
    groups, current = [], []
    for item in items:
        if not current:
            current.append(item)
            continue
        bi, tag = _tag(item["entity"])
        _, last_tag = _tag(current[-1]["entity"])
        if tag == last_tag and bi != "B":
            current.append(item)
        else:
            groups.append(_group(current, tokenizer))
            current = [item]
    if current:
        groups.append(_group(current, tokenizer))
    return groups


def _token_scores(logits: Any, tokens: int, labels: int) -> np.ndarray:
    """The softmax of each token's logits ([T, labels]; a leading batch of one is dropped, padding rows cut)."""
    array = np.asarray(logits)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2 or array.shape[0] < tokens or array.shape[1] != labels:
        raise ValueError(f"logits of shape {array.shape} do not fit {tokens} tokens and {labels} labels")
    array = array[:tokens]
    # The pipeline turns half precision into float32 and keeps the model's float32 (or float64) otherwise.
    if array.dtype != np.float64:
        array = array.astype(np.float32)
    return _softmax(array)


def _labelled(records: list[dict[str, Any]], strategy: str, labels: list[str], tokenizer: Tokenizer) -> list[dict]:
    """Each token labelled on its own (none, simple), or each word by the strategy (first, average, max)."""
    if strategy in ("none", "simple"):
        items = []
        for record in records:
            idx = record["scores"].argmax()
            items.append({"entity": labels[int(idx)], "score": record["scores"][idx], "index": record["index"],
                          "word": record["word"], "start": record["start"], "end": record["end"]})
        return items
    items, word = [], None
    for record in records:
        if word is None:
            word = [record]
        elif record["is_subword"]:
            word.append(record)
        else:
            items.append(_aggregate_word(word, strategy, labels, tokenizer))
            word = [record]
    if word is not None:
        items.append(_aggregate_word(word, strategy, labels, tokenizer))
    return items


def entities(
    text: str,
    ids: Sequence[int],
    offsets: Sequence[tuple[int, int]],
    special_mask: Sequence[int],
    logits: Any,
    labels: Sequence[str] | Mapping[Any, str],
    aggregation: str = "none",
    tokenizer: Tokenizer | None = None,
    *,
    ignore_labels: Sequence[str] = ("O",),
    unk_id: int | None = -1,
) -> list[dict[str, Any]]:
    """The pipeline's answer for one encoded text (one window of it, with ``stride``).

    Args:
        text: the original text; ``start``/``end`` index into it.
        ids, offsets, special_mask: ``Encoding.ids``, ``Encoding.offsets`` and
            ``Encoding.special_tokens_mask`` of the text (truncated, unpadded).
        logits: the model's logits for those tokens, ``[T, num_labels]`` (or
            ``[1, T, num_labels]``); rows past ``len(ids)`` (padding) are ignored.
            Softmax is applied here, as the pipeline does.
        labels: ``id2label``, as a list or a mapping with int or str keys.
        aggregation: none, simple, first, average or max (case-insensitive).
        tokenizer: the ``tokenizers.Tokenizer`` of ``tokenizer.json``; it names
            tokens and decodes words.
        ignore_labels: entities with these labels (or groups with these tags)
            are dropped; the pipeline's default is ``["O"]``.
        unk_id: the unknown token's id (see :func:`unk_token_id`); the default
            looks it up in ``tokenizer``, ``None`` means "no unknown token".

    Returns:
        JSON-able dicts, in text order: ``entity, score, index, word, start,
        end`` with ``none``; ``entity_group, score, word, start, end`` otherwise.
        ``word`` is decoded from tokens (as the pipeline does), so it may differ
        from ``text[start:end]`` (lower case, no accents, spaces); no entity
        gives ``[]``.
    """
    strategy = aggregation.lower() if isinstance(aggregation, str) else str(aggregation)
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown aggregation strategy {aggregation!r}; expected one of {', '.join(STRATEGIES)}")
    if tokenizer is None:
        raise ValueError("a tokenizers.Tokenizer is needed to name tokens and decode words")
    if not (len(ids) == len(offsets) == len(special_mask)):
        raise ValueError(
            f"ids ({len(ids)}), offsets ({len(offsets)}) and special_mask ({len(special_mask)}) differ in length"
        )
    labels = label_list(labels) if isinstance(labels, Mapping) else list(labels)

    scores = _token_scores(logits, len(ids), len(labels))

    if unk_id == -1:
        unk_id = unk_token_id(tokenizer)
    records = _pre_entities(text, ids, offsets, special_mask, scores, tokenizer, unk_id)

    items = _labelled(records, strategy, labels, tokenizer)
    if strategy != "none":
        items = _group_entities(items, tokenizer)
    ignored = set(ignore_labels)
    kept = [item for item in items if item.get("entity") not in ignored and item.get("entity_group") not in ignored]
    for item in kept:
        item["score"] = float(item["score"])
    return kept


def merge_windows(windows: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Merge the entities of overlapping windows (the pipeline's ``stride=`` mode) into one list.

    Sorted by start; of entities that overlap, the longer one wins, and the
    higher score breaks ties. A single window comes back unchanged, as in the
    pipeline.
    """
    if len(windows) <= 1:
        return [dict(e) for e in windows[0]] if windows else []
    found = sorted((e for window in windows for e in window), key=lambda e: e["start"])
    if not found:
        return []
    merged, previous = [], found[0]
    for entity in found:
        if previous["start"] <= entity["start"] < previous["end"]:
            length, previous_length = entity["end"] - entity["start"], previous["end"] - previous["start"]
            if length > previous_length or (length == previous_length and entity["score"] > previous["score"]):
                previous = entity
        else:
            merged.append(previous)
            previous = entity
    merged.append(previous)
    return merged


def _text(item: Any) -> str:
    return item if isinstance(item, str) else bytes(item).decode("utf-8", errors="replace")


class PostStep:
    """The step after the model, in Triton and in-process alike: each text, its encoding (from the
    tokenizer step) and its logits -> one JSON list of entities per text. Names, labels, aggregation
    and the tokenizer come from the configuration."""

    def __init__(self, tokenizer_file: str, labels: list[str], aggregation: str, text_input: str,
                 logits_input: str, output_name: str):
        self.tokenizer = Tokenizer.from_file(tokenizer_file)
        self.labels, self.aggregation = labels, aggregation
        self.text_input, self.logits_input, self.output_name = text_input, logits_input, output_name
        self.unk_id = unk_token_id(self.tokenizer)
        self.found = 0  # entities in the last answer, for the step's metrics

    @classmethod
    def from_config(cls, model_config: dict, version_dir: str) -> PostStep:
        p = {k: v["string_value"] for k, v in model_config.get("parameters", {}).items()}
        return cls(os.path.join(version_dir, p["tokenizer_file"]), json.loads(p["labels"]), p["aggregation"],
                   p["text_input"], p["logits_input"], model_config["output"][0]["name"])

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One request's inputs, by name -> its output, by name."""
        return {self.output_name: self.answer(inputs[self.text_input], inputs[INPUT_IDS], inputs[ATTENTION_MASK],
                                              inputs[OFFSETS], inputs[SPECIAL_TOKENS_MASK], inputs[self.logits_input])}

    def answer(self, texts, ids, mask, offsets, special, logits) -> np.ndarray:
        """[N, 1] BYTES: the JSON entities of each text, from its real (unpadded) tokens."""
        out = np.empty((len(ids), 1), dtype=object)
        self.found = 0
        for r in range(len(ids)):
            n = int(mask[r].sum())
            found = entities(_text(texts.reshape(-1)[r]), ids[r, :n].tolist(), [tuple(o) for o in offsets[r, :n].tolist()],
                             special[r, :n].tolist(), logits[r, :n], self.labels, self.aggregation, self.tokenizer,
                             unk_id=self.unk_id)
            out[r, 0] = json.dumps(found, ensure_ascii=False).encode("utf-8")
            self.found += len(found)
        return out


class TritonPythonModel(PostAdapter):
    """Triton's side of PostStep: reads the inputs its configuration names, answers each request."""

    def build(self, config: dict, version_dir: str) -> PostStep:
        return PostStep.from_config(config, version_dir)

    def record(self) -> None:
        self.metrics.record({"entities": self.step.found})
