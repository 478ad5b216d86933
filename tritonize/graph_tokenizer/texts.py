"""The texts step of a repository that tokenizes in its graphs: each request's texts checked as the Python
tokenizer step checks them (serving/texts.py) and handed on, a long one as its exact prefix (`_prefix_nodes`).

It runs each request on its own (no batching), so a request it refuses fails alone: the graph after it batches
requests together, and a graph fails its whole batch or none of it. Checked in the order of serving/texts.py: the
request's bytes of text against the bound, each text's UTF-8, blank texts. A refusal is onnxruntime's failure of the
node named for it, so the error the client gets says what was refused and what to send.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ..serving.texts import GRAPH_REFUSALS
from ..spec import checked_text
from .nodes import DOMAIN, TEXT, const, re2_range, text

OPSET = 20  # RegexFullMatch
OUTPUT = checked_text(TEXT)  # the texts, handed on to the model step
TOO_LARGE, NOT_UTF8, BLANK = (GRAPH_REFUSALS[k] for k in ("too_large", "invalid_utf8", "empty"))


def _blank_class() -> str:
    """What Python's str.strip() strips (the Python step's blank test), as an RE2 class."""
    codes = [c for c in range(0x110000) if chr(c).isspace()]
    ranges, first = [], None
    for k, code in enumerate(codes):
        first = code if first is None else first
        if k + 1 == len(codes) or codes[k + 1] != code + 1:
            ranges.append(re2_range(first, code))
            first = None
    return "[" + "".join(ranges) + "]"


def _refuse_if(flags: str, after: str, message: str, key: str) -> list[onnx.NodeProto]:
    """A node, named `message`, that fails where any of the BOOL `flags` holds (it reads index 1 of a one-element
    tensor), and only once the check `after` passed (its index adds that check's zero): checks refuse in order."""
    return [helper.make_node("Cast", [flags], [f"t/{key}_n"], to=TensorProto.INT64),
            helper.make_node("ReduceMax", [f"t/{key}_n", "t/zero_1"], [f"t/{key}_any"], keepdims=1),
            helper.make_node("Add", [f"t/{key}_any", after], [f"t/{key}_at"]),
            helper.make_node("Gather", ["t/one_zero", f"t/{key}_at"], [f"t/{key}_passed"], name=message)]


# A prefix's words: each holds a printable ASCII character (so each is at least one token: no normalizer drops one,
# and under a tokenizer whose prefixes are exact no token spans a space), and the last ends with two.
_WORDS = "(?s)(?:[^ ]*[!-~][^ ]* )*[^ ]*[!-~]{2}"


def _prefix_nodes(words: int) -> list[onnx.NodeProto]:
    """t/texts [N] -> t/read [N]: a text of more than `words` spaces read as its first `words` words where the
    cut is a boundary the Python step also cuts at (serving/tokenizer.py, `_BOUNDARY`: a space after two printable
    ASCII characters and before a third) and each word holds a printable ASCII character, so that the prefix holds
    at least `words` tokens (the max length) and is truncated as the whole text is: its tokens are the whole
    text's. Other texts are read whole. ONNX's StringSplit stops at the split it is asked for, so a 2 MB text
    costs a copy, not the second its whole tokenizing takes, during which the model step holds every request."""
    return [
        helper.make_node("StringSplit", ["t/texts"], ["t/split", "t/counts"], delimiter=" ", maxsplit=words + 1),
        const("t/first", [0]), const("t/words", [words]), const("t/axis1", [1]), const("t/axis1_s", 1),
        text("t/space", " ", ()),
        helper.make_node("Slice", ["t/split", "t/first", "t/words", "t/axis1"], ["t/head"]),
        helper.make_node("StringJoin", ["t/head", "t/space", "t/axis1_s"], ["t/prefix"], domain=DOMAIN),
        # the word after the prefix; a batch of fewer words reads a column past them (it is cut nowhere)
        helper.make_node("Shape", ["t/split"], ["t/parts_shape"], start=1, end=2),
        helper.make_node("Min", ["t/words", "t/parts_shape"], ["t/next_at"]),
        helper.make_node("Squeeze", ["t/next_at"], ["t/next_at_s"]),
        helper.make_node("Concat", ["t/split", TEXT], ["t/split_past"], axis=1),
        helper.make_node("Gather", ["t/split_past", "t/next_at_s"], ["t/next"], axis=1),
        helper.make_node("Greater", ["t/counts", "t/words"], ["t/enough"]),
        helper.make_node("RegexFullMatch", ["t/prefix"], ["t/words_ok"], pattern=_WORDS),
        helper.make_node("RegexFullMatch", ["t/next"], ["t/next_ok"], pattern="(?s)[!-~].*"),
        helper.make_node("And", ["t/enough", "t/words_ok"], ["t/cut_words"]),
        helper.make_node("And", ["t/cut_words", "t/next_ok"], ["t/cut"]),
        helper.make_node("Where", ["t/cut", "t/prefix", "t/texts"], ["t/read"]),
    ]


def prefix_graph(words: int) -> onnx.ModelProto:
    """TEXT [N, 1] -> TEXT_CHECKED [N, 1] read as the texts step reads them, unchecked: what the gate tokenizes."""
    nodes = [const("t/flat", [-1]), const("t/column", [-1, 1]),
             helper.make_node("Reshape", [TEXT, "t/flat"], ["t/texts"]), *_prefix_nodes(words),
             helper.make_node("Reshape", ["t/read", "t/column"], [OUTPUT])]
    return _model(nodes)


def _model(nodes: list[onnx.NodeProto]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "texts", [helper.make_tensor_value_info(TEXT, TensorProto.STRING, ["batch", 1])],
                              [helper.make_tensor_value_info(OUTPUT, TensorProto.STRING, ["batch", 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(DOMAIN, 1)],
                             ir_version=9)


def texts_graph(max_request_bytes: int, prefix_words: int = 0) -> onnx.ModelProto:
    """TEXT [N, 1] -> TEXT_CHECKED [N, 1], the same strings (a long text's exact prefix, where `prefix_words`),
    where the request passes every check."""
    nodes = [const("t/one_zero", [0]), const("t/zero_1", [0]), const("t/flat", [-1]), const("t/zero_s", 0),
             const("t/one_s", 1),
             helper.make_node("Reshape", [TEXT, "t/flat"], ["t/texts"])]
    read = "t/texts"
    if prefix_words:
        nodes += [const("t/column", [-1, 1]), *_prefix_nodes(prefix_words),
                  helper.make_node("Reshape", ["t/read", "t/column"], ["t/read_rows"])]
        read = "t/read_rows"
    passed = "t/one_zero"  # [0] once every check before passed
    if max_request_bytes:  # the whole request's bytes: the end of each text's one part, summed (none: empty)
        nodes += [
            text("t/whole", "(?s)\\C+", ()),
            helper.make_node("StringRegexSplitWithOffsets", ["t/texts", "t/whole", "t/whole"],
                             ["t/parts", "t/begins", "t/ends", "t/rows"], domain=DOMAIN),
            helper.make_node("ReduceSum", ["t/ends", "t/zero_1"], ["t/bytes"], keepdims=1),
            const("t/limit", [max_request_bytes]),
            helper.make_node("Greater", ["t/bytes", "t/limit"], ["t/too_large"]),
            *_refuse_if("t/too_large", passed, TOO_LARGE.format(limit=max_request_bytes), "size"),
        ]
        passed = "t/size_passed"
    nodes += [
        helper.make_node("RegexFullMatch", ["t/texts"], ["t/utf8"], pattern="(?s).*"),  # RE2 matches UTF-8 alone
        helper.make_node("Not", ["t/utf8"], ["t/not_utf8"]),
        *_refuse_if("t/not_utf8", passed, NOT_UTF8, "utf8"),
        helper.make_node("RegexFullMatch", ["t/texts"], ["t/blank"], pattern=f"{_blank_class()}*"),
        *_refuse_if("t/blank", "t/utf8_passed", BLANK, "blank"),
        # the texts come out through the last check, so that no check is left out of the graph
        helper.make_node("Shape", ["t/texts"], ["t/n"]),
        helper.make_node("Squeeze", ["t/n"], ["t/n_s"]),
        helper.make_node("Range", ["t/zero_s", "t/n_s", "t/one_s"], ["t/rows_at"]),
        helper.make_node("Add", ["t/rows_at", "t/blank_passed"], ["t/rows_checked"]),
        helper.make_node("Gather", [TEXT if read == "t/texts" else read, "t/rows_checked"], [OUTPUT], axis=0),
    ]
    return _model(nodes)
