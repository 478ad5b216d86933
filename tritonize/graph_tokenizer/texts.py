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


# A word that is surely at least one token: it holds a letter, a digit or a printable ASCII character (a normalizer
# whose prefixes are exact drops none of them, and under such a tokenizer no token spans a space).
_HOLDS_TOKEN = "(?s)[^ ]*[!-~\\pL\\pN][^ ]*"
# Where a prefix may end (serving/tokenizer.py's `_BOUNDARY`): after two printable ASCII characters, before a third.
_ENDS, _STARTS = "(?s).*[!-~]{2}", "(?s)[!-~].*"
CUTS = 8  # the word counts tried, from the max length on: the first that ends at a boundary is the cut


def _prefix_nodes(words: int) -> list[onnx.NodeProto]:
    """t/texts [N] -> t/read [N]: a text of many words read as its first `words` + k words, the first k (under
    CUTS) where the cut is a boundary the Python step also cuts at and every word before it holds a token, so that
    the prefix holds at least `words` tokens (the max length) and is truncated as the whole text is: its tokens
    are the whole text's. Other texts are read whole, and a batch with no text of `words` + CUTS + 1 words skips
    the cut (an `If`): such texts cost little to tokenize whole. ONNX's StringSplit stops at the split it is asked
    for, so a 2 MB text costs a copy, not the second its whole tokenizing takes, during which the model step
    holds every request."""
    parts = words + CUTS + 2  # the words tried, the word after the last, and the rest
    read = "t/texts"
    cut = [const("c/first", [0]), const("c/tried", [words + CUTS]), const("c/axis1", [1]), const("c/axis1_s", 1),
           const("c/zero_s", 0), text("c/space", " ", ()),
           helper.make_node("Slice", ["t/split", "c/first", "c/tried", "c/axis1"], ["c/words"]),
           helper.make_node("RegexFullMatch", ["c/words"], ["c/holds"], pattern=_HOLDS_TOKEN),
           helper.make_node("Not", ["c/holds"], ["c/empty"]),
           helper.make_node("Cast", ["c/empty"], ["c/empty_n"], to=TensorProto.INT64),
           helper.make_node("CumSum", ["c/empty_n", "c/axis1_s"], ["c/empty_before"]),
           helper.make_node("RegexFullMatch", ["c/words"], ["c/ends"], pattern=_ENDS),
           helper.make_node("RegexFullMatch", ["c/words"], ["c/starts"], pattern=_STARTS)]
    for k in reversed(range(CUTS)):  # the smallest count that cuts wins: its Where is the last
        n, at = words + k, f"c/{k}"
        cut += [const(f"{at}/n", [n]), const(f"{at}/last", n - 1), const(f"{at}/next", n),
                helper.make_node("Gather", ["c/empty_before", f"{at}/last"], [f"{at}/empty"], axis=1),
                helper.make_node("Equal", [f"{at}/empty", "c/zero_s"], [f"{at}/tokens"]),
                helper.make_node("Gather", ["c/ends", f"{at}/last"], [f"{at}/ends"], axis=1),
                helper.make_node("Gather", ["c/starts", f"{at}/next"], [f"{at}/starts"], axis=1),
                helper.make_node("And", [f"{at}/tokens", f"{at}/ends"], [f"{at}/ok1"]),
                helper.make_node("And", [f"{at}/ok1", f"{at}/starts"], [f"{at}/ok"]),
                helper.make_node("Slice", ["t/split", "c/first", f"{at}/n", "c/axis1"], [f"{at}/head"]),
                helper.make_node("StringJoin", [f"{at}/head", "c/space", "c/axis1_s"], [f"{at}/prefix"],
                                 domain=DOMAIN),
                helper.make_node("Where", [f"{at}/ok", f"{at}/prefix", read], [f"{at}/read"])]
        read = f"{at}/read"
    cut.append(helper.make_node("Identity", [read], ["c/read"]))
    out = helper.make_tensor_value_info
    return [
        helper.make_node("StringSplit", ["t/texts"], ["t/split", "t/counts"], delimiter=" ", maxsplit=parts - 1),
        helper.make_node("ReduceMax", ["t/counts"], ["t/most"], keepdims=0),
        const("t/split_parts", parts),
        helper.make_node("Equal", ["t/most", "t/split_parts"], ["t/long"]),
        helper.make_node("If", ["t/long"], ["t/read"],
                         then_branch=helper.make_graph(cut, "cut", [], [out("c/read", TensorProto.STRING, None)]),
                         else_branch=helper.make_graph([helper.make_node("Identity", ["t/texts"], ["w/read"])], "whole",
                                                       [], [out("w/read", TensorProto.STRING, None)])),
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
