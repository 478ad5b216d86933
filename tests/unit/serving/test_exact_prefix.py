"""A long text tokenized from a prefix gives the tokens of the whole text, or the prefix is not used.

Each family's tokenizer is built as its model folder ships it and served as
transformers sees it (its backend tokenizer.json), then every long text is
encoded twice by the served `TextEncoder`: from an exact prefix where the
tokenizer allows one, and whole. Every tensor the tokenizer step can hand on
(ids, segment ids, mask, offsets, special-tokens mask) and the truncation
count must be the same.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support import model_zoo
from tritonize.serving.batching import ENCODING_FIELDS
from tritonize.serving.prefixes import exact_prefixes, prefix_end
from tritonize.serving.tokenizer import TextEncoder

MAX_LENGTH = 32  # the prefix is tried at 16 characters per token: 512 characters
OUTPUTS = tuple(ENCODING_FIELDS)
# Families whose tokenizers are read from a prefix; the others (a custom split pattern) always tokenize whole texts.
PREFIXED = {"bert", "distilbert", "electra", "mpnet", "roberta", "xlm-roberta", "camembert", "albert", "deberta-v2",
            "modernbert", "t5"}


def _long_texts(tokenizer) -> list[str]:
    """Documents far past the max length, with what tokenizers treat specially near every possible cut."""
    corpus = model_zoo.CORPUS
    specials = list(tokenizer.all_special_tokens)
    plain = " ".join(corpus * 6)
    return [
        plain,
        "  ".join(corpus * 6),  # double spaces everywhere
        "\n".join(corpus * 6) + " " + plain,  # newlines, then spaces
        "\t".join(corpus * 3) + " ".join(corpus * 3),
        " ".join(f"{line} {specials[k % len(specials)]}" for k, line in enumerate(corpus * 6)),  # added tokens
        " ".join(f"{w}!! ``quoted'' {w}" for w in ["alpha", "béta", "日本", "x1", "ZZ"] * 60),
        " ".join(["supercalifragilisticexpialidocious" * 5] * 40),  # words longer than WordPiece's 100 characters
        "日本語のテキスト。" * 300 + "終わり",  # no space: never cut
        "word " * 2000,
    ]


@pytest.fixture(scope="module", params=list(model_zoo.FAMILIES))
def family(request, tmp_path_factory) -> tuple[str, object, Path]:
    tok = model_zoo.build_tokenizer(tmp_path_factory.mktemp(request.param), request.param)
    served = tmp_path_factory.mktemp(f"{request.param}-served") / "tokenizer.json"
    tok.backend_tokenizer.save(str(served))  # what generation writes: transformers' own view of the tokenizer
    return request.param, tok, served


def _encoders(served: Path, truncation: str) -> tuple[TextEncoder, TextEncoder]:
    prefixed = TextEncoder(str(served), MAX_LENGTH, [8, 16, MAX_LENGTH], 0, OUTPUTS, truncation)
    whole = TextEncoder(str(served), MAX_LENGTH, [8, 16, MAX_LENGTH], 0, OUTPUTS, truncation)
    whole.prefix_chars = 0  # every text whole
    return prefixed, whole


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_the_families_that_read_a_prefix(family) -> None:
    name, _, served = family
    assert exact_prefixes(json.loads(served.read_text())) == (name in PREFIXED)


def test_a_prefix_gives_the_tokens_of_the_whole_text(family) -> None:
    name, tok, served = family
    prefixed, whole = _encoders(served, "longest_first")
    texts = _long_texts(tok)
    cut = 0
    for text in texts:
        counts_p: dict = {}
        counts_w: dict = {}
        got = prefixed.encode_many([[text]], counts=counts_p)[0]
        expected = whole.encode_many([[text]], counts=counts_w)[0]
        assert _same(got, expected), f"{name}: {text[:60]!r}"
        assert counts_p == counts_w and counts_w["truncated"] == 1
        cut += prefixed._prefix(text) is not text
    # Every text with a space to cut at was tried from a prefix (and encoded whole again where it fell short).
    assert cut == (len(texts) - 1 if name in PREFIXED else 0)


def test_a_pair_cuts_only_the_document(family) -> None:
    name, tok, served = family
    prefixed, whole = _encoders(served, "only_second")
    pairs = [("what does Triton serve?", text) for text in _long_texts(tok)]
    got = prefixed.encode_many([pairs])[0]
    assert _same(got, whole.encode_many([pairs])[0]), name
    assert all(prefixed._prefix(p)[0] == p[0] for p in pairs)
    assert sum(prefixed._prefix(p) is not p for p in pairs) == (len(pairs) - 1 if name in PREFIXED else 0)


def test_a_short_text_and_a_text_without_a_cut_are_encoded_whole() -> None:
    assert prefix_end("short text", 512) is None
    assert prefix_end("x" * 2000, 512) is None  # no space at all
    assert prefix_end("日本語 " * 400, 512) is None  # no space between printable ASCII
    text = "é" * 600 + " a b cd ef"
    assert text[: prefix_end(text, 512)] == "é" * 600 + " a b cd"  # the first space after two printable ASCII, before one


@pytest.mark.parametrize("change, why", [
    ({"normalizer": {"type": "Precompiled", "precompiled_charsmap": ""}}, "maps graphemes by a table"),
    ({"normalizer": {"type": "Replace", "pattern": {"String": "a"}, "content": " "}}, "makes a space"),
    ({"normalizer": {"type": "Replace", "pattern": {"Regex": "a.b"}, "content": "c"}}, "a pattern that may span a space"),
    ({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\w+"}, "behavior": "Isolated", "invert": False}},
     "a custom split pattern"),
    ({"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": False}},
     "one piece for the whole text"),
    ({"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}},
     "one piece for the whole text"),
    ({"pre_tokenizer": None}, "no pre-tokenizer"),
    ({"model": {"type": "BPE", "dropout": 0.1}}, "random merges"),
    ({"added_tokens": [{"content": "New York", "lstrip": False, "rstrip": False}]}, "an added token with a space"),
    ({"added_tokens": [{"content": "<x>", "lstrip": False, "rstrip": True}]}, "an added token that takes the space after it"),
])
def test_tokenizers_that_could_change_earlier_tokens_encode_whole_texts(change: dict, why: str) -> None:
    bert = {"normalizer": {"type": "BertNormalizer"}, "pre_tokenizer": {"type": "BertPreTokenizer"},
            "model": {"type": "WordPiece"}, "added_tokens": [{"content": "[CLS]", "lstrip": False, "rstrip": False}]}
    assert exact_prefixes(bert)
    assert not exact_prefixes({**bert, **change}), why
