"""BERT's WordPiece in the graph: onnxruntime-extensions' string operators and `WordpieceTokenizer` tokenize the
whole batch in one pass (a Loop cost ~400 µs a row), each row on its own.

The operator is not Hugging Face's tokenizer (accents, added tokens, whitespace differ in places), so the graph
normalizes each text first with what the tokenizer's own normalizer makes of each character, and matches special
tokens in the raw text as tokenizers does; the gate (gate.py) holds the result to the served tokenizer. A NUL ends
a text for these operators.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import TokenizerRefused as Refused
from .nodes import DOMAIN, FLAT_IDS, N_ROWS, ROW_TOKENS, TEXTS, const, re2_range, rows_in, text

MARK, SPECIAL, DROP = "\x01", "\x02", "\x03"  # the graph's own: row ends, special tokens' placeholders, dropped
ROW_END = MARK * 2  # a run of its own at a text's end, so the map (which drops a MARK the text wrote) keeps it
LONG_RANGE = 256  # dropped ranges this long go to one small regular expression, the rest to a map
SUPPORTED = "BERT WordPiece tokenizers (BertNormalizer, BertPreTokenizer, WordPiece)"


@dataclass(frozen=True)
class WordPiece:
    """What the graph needs of a BERT WordPiece tokenizer.json, the normalizer included.

    The operator's own normalizer parts from tokenizers' (it lowercases and strips accents in Latin letters only,
    and keeps format characters), so the graph normalizes each text first with what tokenizers' BertNormalizer
    makes of each character (asked of the tokenizer itself): `removed`, the
    characters it drops (controls, format and private-use characters, combining marks); `mapped`, the characters
    it changes (lowercase, accents, whitespace; ideographs and punctuation it spaces).
    Special tokens written in a text are matched before, on the raw text, as tokenizers matches them.
    """

    vocab: tuple[str, ...]  # by id
    unk_token: str
    max_chars_per_word: int  # a longer word is one [UNK]
    specials: tuple[tuple[str, int], ...]  # added tokens, matched in the raw text
    removed: tuple[tuple[int, int], ...]  # the code points the normalizer drops, as (first, last) ranges
    mapped: str  # "char\tnormalized" lines, StringMapping's map

    @property
    def unk_id(self) -> int:
        return self.vocab.index(self.unk_token)

    @classmethod
    def read(cls, tokenizer_file: Path) -> WordPiece:
        """The tokenizer's settings, refused in one line where it is not a BERT WordPiece tokenizer."""
        from tokenizers import Tokenizer

        spec = json.loads(Path(tokenizer_file).read_text(encoding="utf-8"))
        model, normalizer = spec.get("model") or {}, spec.get("normalizer") or {}
        pre, post = spec.get("pre_tokenizer") or {}, spec.get("post_processor") or {}
        found = (model.get("type"), normalizer.get("type"), pre.get("type"), post.get("type"))
        if found[:3] != ("WordPiece", "BertNormalizer", "BertPreTokenizer"):
            raise Refused(f"the graph tokenizer serves {SUPPORTED}; this tokenizer is "
                          f"{'/'.join(str(f) for f in found[:3])}")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise Refused(f"the graph tokenizer serves WordPiece with '##' continuations, not "
                          f"{model.get('continuing_subword_prefix')!r}")
        vocab = model["vocab"]
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise Refused("the graph tokenizer needs a WordPiece vocabulary numbered 0..n-1 without gaps")
        added = spec.get("added_tokens") or []
        loose = [t["content"] for t in added if t.get("normalized") or t.get("lstrip") or t.get("rstrip")
                 or t.get("single_word")]
        if loose:
            raise Refused(f"the graph tokenizer matches added tokens exactly as written; {loose[0]!r} is matched "
                          "normalized, stripped or as a single word")
        served = Tokenizer.from_file(str(tokenizer_file))
        removed, mapped = normalization(served.normalizer, served.pre_tokenizer)
        odd = [t["content"] for t in added if any(a <= ord(c) <= b for c in t["content"] for a, b in removed)]
        if odd:  # the graph marks row ends and special tokens with such characters (MARK, SPECIAL)
            raise Refused(f"the graph tokenizer matches added tokens without characters the normalizer drops; "
                          f"{odd[0]!r} has one")
        return cls(tuple(t for t, _ in by_id), model.get("unk_token", "[UNK]"),
                   int(model.get("max_input_chars_per_word", 100)),
                   tuple((t["content"], t["id"]) for t in added), removed, mapped)


def normalization(normalizer, pre_tokenizer) -> tuple[tuple[tuple[int, int], ...], str]:
    """What the normalizer does to each character: the ranges of those it drops, and a map of those it changes
    (lowercase, accents, whitespace; ideographs it spaces). Punctuation, which the pre-tokenizer splits off, is
    spaced too, so that every word stands between spaces: the operator knows fewer punctuation marks (U+FF01,
    the fullwidth '!'), and the graph finds words by the gaps between tokens (`_batch_tokens`)."""
    codes = [c for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    punctuation = {chr(c) for c in codes if len(pre_tokenizer.pre_tokenize_str(f"a{chr(c)}a")) == 3}
    dropped: list[int] = []
    lines = []
    for code in codes:
        char = chr(code)
        out = normalizer.normalize_str(char)
        spaced = "".join(f" {x} " if x in punctuation else x for x in out)
        if out == "":
            dropped.append(code)
        elif spaced != char and char not in "\t\n" and not {"\t", "\n"} & set(spaced):
            lines.append(f"{char}\t{spaced}")
    ranges, first = [], None
    for k, code in enumerate(dropped):
        first = code if first is None else first
        if k + 1 == len(dropped) or dropped[k + 1] != code + 1:
            ranges.append((first, code))
            first = None
    return tuple(ranges), "\n".join(lines)


def _vocab(w: WordPiece) -> dict[str, int]:
    """The vocabulary the operators read: the model's, and each special token's placeholder word."""
    return {**{t: i for i, t in enumerate(w.vocab)}, **{_placeholder(k): i for k, (_, i) in enumerate(w.specials)}}


def _placeholder(k: int) -> str:
    return f"{SPECIAL}{k}"


def wordpiece_nodes(wordpiece: WordPiece) -> list[onnx.NodeProto]:
    """TEXT [N, 1] -> FLAT_IDS, ROW_TOKENS: every row's WordPiece tokens, special tokens written in it included.

    Without a Loop and with no large regular expression (the extensions compile a pattern on every call: the class
    of all dropped characters cost ~200 µs a call). Each text, ended by MARK, is cut into runs: a special token
    (matched in the raw text, as tokenizers matches it), one character that is not plain ASCII, or a run of plain
    ASCII between them. One map (parsed once) makes a special token a placeholder word (SPECIAL and its number, in
    the operators' vocabulary), a character the normalizer changes what it becomes, one it drops DROP. The batch is
    joined into one string, DROP removed, cut apart at MARK into rows again, each row split into words at blanks
    and word-pieced.
    """
    w = wordpiece
    long_ranges = [(a, b) for a, b in w.removed if b - a >= LONG_RANGE]
    changed = {line.split("\t", 1)[0] for line in w.mapped.split("\n") if line}
    dropped = {chr(c) for a, b in w.removed for c in range(a, b + 1)
               if b - a < LONG_RANGE and not 0xD800 <= c < 0xE000}
    plain = "".join(re2_range(c) for c in range(1, 0x80) if chr(c) not in changed and chr(c) not in dropped)
    specials = "".join(f"{re.escape(t)}|" for t, _ in sorted(w.specials, key=lambda s: -len(s[0])))
    # Last, so that a special token written as one character the normalizer changes is the special token.
    normal_map = "\n".join([w.mapped, *(f"{c}\t{DROP}" for c in sorted(dropped) if c != DROP),
                            *(f"{t}\t {_placeholder(k)} " for k, (t, _) in enumerate(w.specials))])
    vocab = _vocab(w)
    nodes = [
        const("flat", [-1]), const("zero", [0]), const("zero_s", 0), const("one_s", 1), const("one", [1]),
        const("minus_one", [-1]), const("axis0", [0]), const("axis_s", 0), const("unk_id", w.unk_id),
        const("no_rows", np.zeros(0, dtype=np.int64)), const("two", 2), const("two_1", [2]),
        text("nothing", ""), text("joiner", "", ()), text("mark", MARK, ()),
        text("blanks", " \t\n", ()),
        text("dropped_here", "[" + "".join(re2_range(a, b) for a, b in [(ord(DROP), ord(DROP)), *long_ranges])
              + "]"),
        text("row_end", ROW_END, ()), text("any_bytes", "\\C*"),
        text("runs_pattern", f"({re2_range(ord(MARK)) * 2}\\z|{specials}[^{plain}])"),
        helper.make_node("Constant", [], ["keep_empty"], value=helper.make_tensor("k", TensorProto.BOOL, [], [False])),
        helper.make_node("Constant", [], ["skip_empty"], value=helper.make_tensor("s", TensorProto.BOOL, [], [True])),
        *rows_in(),
        helper.make_node("Expand", ["row_end", N_ROWS], ["row_ends_text"]),
        helper.make_node("StringConcat", [TEXTS, "row_ends_text"], ["texts_marked"], domain=DOMAIN),
        # Runs: the ROW_END the graph wrote (at the very end: a MARK the text wrote is a character the map drops),
        # a special token (leftmost first, longest first, as tokenizers matches them in the raw text), one
        # character that is not plain ASCII, or (between those) a run of plain ASCII, which no map changes.
        helper.make_node("StringRegexSplitWithOffsets", ["texts_marked", "runs_pattern", "any_bytes"],
                         ["runs", "r_starts", "r_ends", "r_splits"], domain=DOMAIN),
        helper.make_node("StringMapping", ["runs"], ["normal_runs"], domain=DOMAIN, map=normal_map),
        helper.make_node("StringJoin", ["normal_runs", "joiner", "axis_s"], ["batch_text"], domain=DOMAIN),
        helper.make_node("StringRegexReplace", ["batch_text", "dropped_here", "nothing"], ["batch_clean"],
                         domain=DOMAIN),
        # ROW_END is two MARKs: each row, then an empty string, then the next row.
        helper.make_node("StringSplit", ["batch_clean", "mark", "keep_empty"], ["row_at", "rows_and_after", "r_shape"],
                         domain=DOMAIN),
        helper.make_node("Mul", [N_ROWS, "two"], ["n_rows_2"]),
        helper.make_node("Slice", ["rows_and_after", "zero", "n_rows_2", "zero", "two_1"], ["rows_text"]),
        # Every word now stands between blanks (punctuation and ideographs spaced, other whitespace made a space
        # by the map; the normalizer drops the other controls).
        helper.make_node("StringSplit", ["rows_text", "blanks", "skip_empty"], ["word_at", "words", "w_shape"],
                         domain=DOMAIN),
        helper.make_node("Gather", ["word_at", "zero_s"], ["word_row"], axis=1),
        *_pieces(w, vocab),
        *_spelled_or_unknown(),
        *_in_word_order(),
    ]
    return nodes


def _pieces(w: WordPiece, vocab: dict[str, int]) -> list[onnx.NodeProto]:
    """words -> whole_id (a word's id where the vocabulary holds it whole, else -1), pieced (the other words),
    and pieces_ids, splits: those words' WordPiece tokens."""
    return [
        # A word the vocabulary holds whole is its own token (WordPiece tries the whole word first): one map
        # lookup, so only the other words go to the operator, which costs several times more a word.
        helper.make_node("StringToVector", ["words"], ["whole_column"], domain=DOMAIN,
                         map="\n".join(f"{t}\t{i}" for t, i in vocab.items() if len(t) <= w.max_chars_per_word),
                         unk="-1"),
        helper.make_node("Reshape", ["whole_column", "flat"], ["whole_id"]),
        helper.make_node("Less", ["whole_id", "zero_s"], ["pieced"]),
        helper.make_node("Compress", ["words", "pieced"], ["pieced_words"], axis=0),
        helper.make_node("WordpieceTokenizer", ["pieced_words", "no_rows"], ["word_pieces", "splits", "begins", "limits"],
                         domain=DOMAIN, vocab=json.dumps(vocab, ensure_ascii=False), suffix_indicator="##",
                         unknown_token=w.unk_token, max_input_chars_per_word=w.max_chars_per_word),
        helper.make_node("StringToVector", ["word_pieces"], ["token_column"], domain=DOMAIN,
                         map="\n".join(f"{t}\t{i}" for t, i in vocab.items()), unk=str(w.unk_id)),
        helper.make_node("Reshape", ["token_column", "flat"], ["pieces_ids"]),
    ]


def _spelled_or_unknown() -> list[onnx.NodeProto]:
    """pieces_ids -> kept_ids, kept_word: each pieced word's tokens, or one [UNK] where it cannot be spelled."""
    return [
        # A word the vocabulary cannot spell is one [UNK], as tokenizers' WordPiece has it; the operator keeps
        # the pieces it found before the failing one. `splits` holds where each word's tokens begin.
        helper.make_node("Shape", ["pieces_ids"], ["t"]),
        helper.make_node("Sub", ["pieces_ids", "pieces_ids"], ["no_tokens"]),
        helper.make_node("Slice", ["splits", "one", "minus_one"], ["inner_starts"]),
        helper.make_node("Shape", ["inner_starts"], ["n_inner"]),
        helper.make_node("Expand", ["one_s", "n_inner"], ["one_per_start"]),
        helper.make_node("ScatterElements", ["no_tokens", "inner_starts", "one_per_start"], ["word_marks"],
                         reduction="add"),
        helper.make_node("CumSum", ["word_marks", "zero_s"], ["word"]),
        helper.make_node("Squeeze", ["t", "axis0"], ["t_s"]),
        helper.make_node("Range", ["zero_s", "t_s", "one_s"], ["position"]),
        helper.make_node("Greater", ["word_marks", "zero"], ["starts_word"]),
        helper.make_node("Equal", ["position", "zero_s"], ["at_first"]),
        helper.make_node("Or", ["starts_word", "at_first"], ["opens"]),
        helper.make_node("Equal", ["pieces_ids", "unk_id"], ["is_unk"]),
        helper.make_node("Cast", ["is_unk"], ["is_unk_n"], to=TensorProto.INT64),
        helper.make_node("ScatterElements", ["no_tokens", "word", "is_unk_n"], ["unk_per_word"], reduction="add"),
        helper.make_node("Gather", ["unk_per_word", "word"], ["unk_in_word_n"]),
        helper.make_node("Greater", ["unk_in_word_n", "zero"], ["unk_in_word"]),
        helper.make_node("Where", ["unk_in_word", "unk_id", "pieces_ids"], ["spelled"]),
        helper.make_node("Not", ["unk_in_word"], ["whole"]),
        helper.make_node("Or", ["whole", "opens"], ["keep"]),
        helper.make_node("Compress", ["spelled", "keep"], ["kept_ids"], axis=0),
        helper.make_node("Compress", ["word", "keep"], ["kept_word"], axis=0),
    ]


def _in_word_order() -> list[onnx.NodeProto]:
    """The tokens back in the order of all words (FLAT_IDS), and how many each row has (ROW_TOKENS)."""
    return [
        # Back in the order of all words: a word held whole is one token, any other its kept pieces.
        helper.make_node("Shape", ["whole_id"], ["n_words"]),
        helper.make_node("Squeeze", ["n_words", "axis0"], ["n_words_s"]),
        helper.make_node("Range", ["zero_s", "n_words_s", "one_s"], ["word_index"]),
        helper.make_node("Compress", ["word_index", "pieced"], ["pieced_index"], axis=0),
        helper.make_node("Gather", ["pieced_index", "kept_word"], ["piece_word"]),
        helper.make_node("Not", ["pieced"], ["held"]),
        helper.make_node("Cast", ["held"], ["held_n"], to=TensorProto.INT64),
        helper.make_node("Shape", ["piece_word"], ["k_pieces"]),
        helper.make_node("Expand", ["one_s", "k_pieces"], ["piece_ones"]),
        helper.make_node("ScatterElements", ["held_n", "piece_word", "piece_ones"], ["word_tokens"],
                         reduction="add"),
        helper.make_node("CumSum", ["word_tokens", "zero_s"], ["tokens_through"]),
        helper.make_node("Sub", ["tokens_through", "word_tokens"], ["tokens_before"]),
        helper.make_node("CumSum", ["held_n", "zero_s"], ["held_through"]),
        helper.make_node("Sub", ["held_through", "held_n"], ["held_before"]),
        helper.make_node("Compress", ["tokens_before", "held"], ["held_at"], axis=0),
        helper.make_node("Compress", ["whole_id", "held"], ["held_ids"], axis=0),
        helper.make_node("Squeeze", ["k_pieces", "axis0"], ["k_pieces_s"]),
        helper.make_node("Range", ["zero_s", "k_pieces_s", "one_s"], ["piece_index"]),
        helper.make_node("Gather", ["held_before", "piece_word"], ["held_before_piece"]),
        helper.make_node("Add", ["piece_index", "held_before_piece"], ["piece_at"]),
        helper.make_node("Concat", ["held_at", "piece_at"], ["token_at"], axis=0),
        helper.make_node("Concat", ["held_ids", "kept_ids"], ["token_ids_unordered"], axis=0),
        helper.make_node("ScatterElements", ["token_ids_unordered", "token_at", "token_ids_unordered"],
                         [FLAT_IDS]),
        # Each row's tokens: how many.
        helper.make_node("ConstantOfShape", [N_ROWS], ["no_rows_tokens"],
                         value=helper.make_tensor("z", TensorProto.INT64, [1], [0])),
        helper.make_node("ScatterElements", ["no_rows_tokens", "word_row", "word_tokens"], [ROW_TOKENS],
                         reduction="add"),
    ]
