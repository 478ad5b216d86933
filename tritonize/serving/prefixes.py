"""Exact prefixes: where a long text may be cut so that its prefix encodes to the whole text's first tokens.

Served: imported by the tokenizer step (tokenizer.py), so a text much longer than the model reads is tokenized
from a prefix only where that is provably exact; standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# A long text may be cut just before an ASCII space that follows two printable ASCII characters and precedes a
# third. Under the tokenizer pieces accepted below, that space always starts a new pre-token and nothing before
# it changes with what follows, so the tokens of the prefix are the first tokens of the whole text. The prefix is
# kept only when its own encoding is truncated: then every token the model reads comes from it.
PREFIX_CHARS_PER_TOKEN = 16  # where the first cut is tried; real text runs 3-12 characters per token
_BOUNDARY = re.compile(r"(?<=[!-~]{2}) (?=[!-~])")
_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents", "Strip"}
_WHITESPACE_ONLY = {" {2,}", r"\s{2,}|[\n\r\t]"}  # Replace patterns that can match nothing but whitespace
_SPACE_SPLITTERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit"}
_WITHIN_PIECES = {"Punctuation", "Digits", "ByteLevel"}  # split or map inside the pieces a splitter made
_PER_PIECE_MODELS = {"WordPiece", "BPE", "Unigram", "WordLevel"}


def _local_normalizer(n: Mapping[str, Any] | None) -> bool:
    """Maps each character (or a literal run without whitespace) on its own: never across a space."""
    if n is None:
        return True
    kind = n.get("type")
    if kind == "Sequence":
        return all(_local_normalizer(m) for m in n.get("normalizers", []))
    if kind == "Replace":
        pattern, content = n.get("pattern", {}), n.get("content", "")
        if "String" in pattern:
            return all(t and not any(c.isspace() for c in t) for t in (pattern["String"], content))
        return pattern.get("Regex") in _WHITESPACE_ONLY
    return kind in _LOCAL_NORMALIZERS


def _splits_at_spaces(p: Mapping[str, Any]) -> bool:
    """A space after a non-space character always starts a new pre-token."""
    kind = p.get("type")
    if kind == "ByteLevel":
        return bool(p.get("use_regex", True))
    if kind == "Metaspace":
        return bool(p.get("split", True))
    return kind in _SPACE_SPLITTERS


def exact_prefixes(tokenizer_json: Mapping[str, Any]) -> bool:
    """True when a prefix cut at a `_BOUNDARY` encodes to the first tokens of the whole text.

    Accepted: per-character normalizers, pre-tokenizers that split at spaces (BERT, whitespace, byte-level
    BPE with its regex, SentencePiece's Metaspace), models that encode each pre-token on its own, and added
    tokens without whitespace that do not swallow the space after them. Anything else (SentencePiece's
    precompiled normalizer, custom split patterns such as Qwen's, BPE dropout) tokenizes whole texts.
    """
    pre = tokenizer_json.get("pre_tokenizer")
    if pre is None:
        return False
    members = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    model = tokenizer_json.get("model") or {}
    return (
        _local_normalizer(tokenizer_json.get("normalizer"))
        and bool(members) and _splits_at_spaces(members[0])
        and all(_splits_at_spaces(m) or m.get("type") in _WITHIN_PIECES for m in members[1:])
        and model.get("type") in _PER_PIECE_MODELS and not model.get("dropout")
        and all(not a.get("rstrip") and not any(c.isspace() for c in a.get("content", ""))
                for a in tokenizer_json.get("added_tokens", []))
    )


def prefix_end(text: str, start: int) -> int | None:
    """Where `text` may be cut at or after `start` (a `_BOUNDARY`), or None."""
    if len(text) <= start:
        return None
    found = _BOUNDARY.search(text, max(start, 2))
    return found.start() if found else None
