"""A long text tokenized from an exact prefix, as the Python tokenizer step reads it (serving/tokenizer.py's
`exact_prefixes`): a text of a 2 MB request costs the graph milliseconds, not the second its whole tokenizing
takes, during which the one model step holds every other request.

Where the tokenizer allows it, each text is cut just before the first space at or after PREFIX_CHARS_PER_TOKEN x
max length characters that follows two printable ASCII characters and precedes a third (`_BOUNDARY`): under such
a tokenizer the prefix's tokens are the whole text's first ones. The prefix serves where its own tokens reach the
max length (the row is truncated either way); where a cut row's do not (words the vocabulary cannot split, a few
tokens each), the whole batch is tokenized again uncut, in an `If`, as the Python step encodes such a text whole.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from ..serving.batching import TRUNCATED
from ..serving.tokenizer import PREFIX_CHARS_PER_TOKEN
from .nodes import DOMAIN, TEXT, prefixed, sort_nodes, text

RE2_REPEAT = 1000  # the largest count RE2 takes in one {n}


def cut_pattern(start: int) -> str:
    """RE2: the text's prefix before the first `_BOUNDARY` space at or after `start` characters (group 1), then
    that space and the rest."""
    whole, part = divmod(max(start - 2, 0), RE2_REPEAT)
    at_least = (f"(?:.{{{RE2_REPEAT}}}){{{whole}}}" if whole else "") + f".{{{part},}}?"
    return f"(?s)^({at_least}[!-~]{{2}}) [!-~].*$"


def with_prefix_cut(tokenizer: onnx.ModelProto, max_length: int) -> onnx.ModelProto:
    """The tokenizer graph reading each text from its exact prefix (the same inputs and outputs)."""
    outputs = [o.name for o in tokenizer.graph.output]
    infos = {o.name: o.type.tensor_type.elem_type for o in tokenizer.graph.output}

    def branch(name: str, nodes: list[onnx.NodeProto]) -> onnx.GraphProto:
        return helper.make_graph(nodes, name, [],
                                 [helper.make_tensor_value_info(f"{name}/{o}", infos[o], None) for o in outputs])

    on_cut = prefixed(list(tokenizer.graph.node), "prefix/", set())  # reads prefix/TEXT, writes prefix/<output>
    whole = branch("whole", prefixed(list(tokenizer.graph.node), "whole/", {TEXT}))  # the texts as they came
    kept = branch("kept", [helper.make_node("Identity", [f"prefix/{o}"], [f"kept/{o}"]) for o in outputs])
    nodes = [
        text("prefix/pattern", cut_pattern(PREFIX_CHARS_PER_TOKEN * max_length), ()),
        text("prefix/rewrite", "\\1", ()),
        helper.make_node("StringRegexReplace", [TEXT, "prefix/pattern", "prefix/rewrite"], [f"prefix/{TEXT}"],
                         domain=DOMAIN),
        *on_cut,
        # a row that was cut and whose prefix is not truncated: its whole text's tokens may differ
        helper.make_node("StringEqual", [TEXT, f"prefix/{TEXT}"], ["prefix/uncut"], domain=DOMAIN),
        helper.make_node("Not", ["prefix/uncut"], ["prefix/was_cut"]),
        helper.make_node("Not", [f"prefix/{TRUNCATED}"], ["prefix/short"]),
        helper.make_node("And", ["prefix/was_cut", "prefix/short"], ["prefix/wrong"]),
        helper.make_node("Cast", ["prefix/wrong"], ["prefix/wrong_n"], to=TensorProto.INT64),
        helper.make_node("ReduceMax", ["prefix/wrong_n"], ["prefix/any_wrong_n"], keepdims=0),
        helper.make_node("Cast", ["prefix/any_wrong_n"], ["prefix/any_wrong"], to=TensorProto.BOOL),
        helper.make_node("If", ["prefix/any_wrong"], outputs, then_branch=whole, else_branch=kept),
    ]
    graph = helper.make_graph(sort_nodes(nodes), "tokenizer", list(tokenizer.graph.input), list(tokenizer.graph.output))
    return helper.make_model(graph, opset_imports=list(tokenizer.opset_import), ir_version=tokenizer.ir_version)
