"""What every part of a tokenizer graph is made of: constants, names, and nodes in an order ONNX accepts."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..spec import TEXT_INPUT

DOMAIN = "ai.onnx.contrib"  # onnxruntime-extensions' operators
OPSET = 17
TEXT = TEXT_INPUT
# What a family's part hands the frame (frame.py): every row's tokens, special tokens aside, one after another,
# and how many each row has.
FLAT_IDS, ROW_TOKENS, N_ROWS, TEXTS = "flat_ids", "row_tokens", "n_rows", "texts"
# Whitespace as tokenizers (Rust's char::is_whitespace) knows it; RE2's \s is ASCII's alone.
WHITESPACE = "\\t\\n\\x{0b}\\x{0c}\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"


def const(name: str, values, dtype=np.int64) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.asarray(values, dtype=dtype), name))


def text(name: str, value: str, shape: tuple[int, ...] = (1,)) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name],
                            value=helper.make_tensor(name, TensorProto.STRING, list(shape), [value.encode("utf-8")]))


def flag(name: str, value: bool) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.BOOL, [], [value]))


def re2_range(first: int, last: int | None = None) -> str:
    return f"\\x{{{first:x}}}" + (f"-\\x{{{last:x}}}" if last is not None and last != first else "")


def re2_literal(value: str) -> str:
    """`value` matched as written (RE2's \\Q...\\E, with a \\E inside it kept apart)."""
    return "\\Q" + value.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def rows_in() -> list[onnx.NodeProto]:
    """TEXT [N, 1] -> TEXTS [N] and N_ROWS [1]."""
    return [const("rows_flat", [-1]), helper.make_node("Reshape", [TEXT, "rows_flat"], [TEXTS]),
            helper.make_node("Shape", [TEXTS], [N_ROWS])]


def reads(node: onnx.NodeProto) -> set[str]:
    """What a node reads: its inputs, and what the graphs of its attributes (an If's branches) read from outside."""
    found = {i for i in node.input if i}
    for attribute in node.attribute:
        for graph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)):
            inner = {o for n in graph.node for o in n.output} | {i.name for i in graph.input}
            found |= {x for n in graph.node for x in reads(n) if x not in inner}
    return found


def sort_nodes(nodes: list[onnx.NodeProto], given: tuple[str, ...] = (TEXT,)) -> list[onnx.NodeProto]:
    """The nodes in an order where each reads only what earlier ones wrote (ONNX asks it of a graph)."""
    written = set(given)
    done, left = [], list(nodes)
    while left:
        ready = [n for n in left if all(i in written for i in reads(n))]
        if not ready:
            raise ValueError(f"the tokenizer graph reads what no node writes: {left[0].input}")
        done += ready
        written.update(o for n in ready for o in n.output)
        taken = {id(n) for n in ready}
        left = [n for n in left if id(n) not in taken]
    return done


def prefixed(nodes: list[onnx.NodeProto], prefix: str, kept: set[str]) -> list[onnx.NodeProto]:
    """The nodes with every tensor they name but `kept` under `prefix`: a tokenizer's names never meet those of
    the model it is put before (a graph of any exporter may name an initializer "one")."""
    out = []
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.input[:]
        del copy.output[:]
        copy.input.extend(x if not x or x in kept else prefix + x for x in node.input)
        copy.output.extend(x if not x or x in kept else prefix + x for x in node.output)
        out.append(copy)
    return out
