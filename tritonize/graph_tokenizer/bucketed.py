"""The model's graph run once per bucket the batch's rows fall in, each run on that bucket's rows cut to the
longest of them: a batch of mixed lengths costs what its rows cost, not its longest row times its rows (the Python
model step's regrouping, serving/batching.py's `length_groups`, done by the graph; no Python where it serves)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from ..errors import TritonizeError
from ..serving.batching import ATTENTION_MASK, RUN_TOKENS
from .nodes import const

PREFIX = "bucketed/"  # what the model's own tensors are called inside the loop's body


def _renamed(model: onnx.ModelProto, inputs: dict[str, str]) -> list[onnx.NodeProto]:
    """The model's nodes, each tensor it makes prefixed (so none shadows a name outside the loop), its inputs
    read from `inputs` and its initializers from outside the loop, as they are named; the graphs of its own nodes
    (an If's branches) read the renamed tensors too."""
    own = {o for n in model.graph.node for o in n.output}

    def name(x: str) -> str:
        return inputs.get(x, PREFIX + x if x in own else x)

    def copy(node: onnx.NodeProto, top: bool) -> onnx.NodeProto:
        out = onnx.NodeProto()
        out.CopyFrom(node)
        del out.input[:]
        out.input.extend(name(x) if x else x for x in node.input)
        if top:
            del out.output[:]
            out.output.extend(name(x) if x else x for x in node.output)
            out.name = PREFIX + node.name if node.name else node.name
        for attribute in out.attribute:  # a branch reads the outer tensors by their new names; its own it keeps
            for graph in ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)):
                nested = [copy(n, False) for n in graph.node]
                del graph.node[:]
                graph.node.extend(nested)
        return out

    return [copy(node, True) for node in model.graph.node]


def bucketed(model: onnx.ModelProto, buckets: tuple[int, ...], run_tokens: int = RUN_TOKENS) -> onnx.ModelProto:
    """The same inputs and outputs: every input [rows, width] (an attention mask among them), every output one
    value a row ([rows, ...]); the rows grouped by the bucket of their real length (the mask's), each bucket's rows
    cut into runs of at most `run_tokens` tokens (at least one row; 0: no cut), the model run on each group cut to
    its longest row, in a Loop, and each row's outputs put back in its place."""
    per_run = [max(1, run_tokens // b) if run_tokens else 1 << 30 for b in buckets] + [1]  # [1]: beyond every bucket
    graph = model.graph
    inputs = [i.name for i in graph.input if i.name not in {t.name for t in graph.initializer}]
    outputs = [o for o in graph.output]
    body_inputs = {x: f"group/{x}" for x in inputs}
    body = [
        helper.make_node("Gather", ["g/present", "iteration"], ["group/bucket"]),
        helper.make_node("Equal", ["g/row_group", "group/bucket"], ["group/is"]),
        helper.make_node("NonZero", ["group/is"], ["group/rows_2"]),
        helper.make_node("Reshape", ["group/rows_2", "g/minus_one"], ["group/rows"]),
        helper.make_node("Gather", ["g/real", "group/rows"], ["group/real"]),
        helper.make_node("ReduceMax", ["group/real"], ["group/longest"], keepdims=1),  # its longest row
        # at least one column: a warm-up's rows are all padding (Triton's zero_data), and no kernel need take none
        helper.make_node("Max", ["group/longest", "g/one_column"], ["group/width"]),
        *(node for x in inputs for node in (
            helper.make_node("Gather", [x, "group/rows"], [f"group/{x}_rows"], axis=0),
            helper.make_node("Slice", [f"group/{x}_rows", "g/axis_0", "group/width", "g/axis_1"], [body_inputs[x]]))),
        *_renamed(model, body_inputs),
        helper.make_node("SequenceInsert", ["rows_in", "group/rows"], ["rows_out"]),
        *(helper.make_node("SequenceInsert", [f"{o.name}_in", PREFIX + o.name], [f"{o.name}_out"]) for o in outputs),
        helper.make_node("Identity", ["cond_in"], ["cond_out"]),
    ]

    def seq(name: str, elem: int) -> onnx.ValueInfoProto:
        return helper.make_value_info(name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None)))

    loop_body = helper.make_graph(
        body, "bucket",
        [helper.make_tensor_value_info("iteration", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         seq("rows_in", TensorProto.INT64),
         *(seq(f"{o.name}_in", o.type.tensor_type.elem_type) for o in outputs)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         seq("rows_out", TensorProto.INT64),
         *(seq(f"{o.name}_out", o.type.tensor_type.elem_type) for o in outputs)],
    )
    main = [
        const("g/bucket_lengths", list(buckets)), const("g/axis_0", [0]), const("g/axis_1", [1]),
        const("g/minus_one", [-1]), const("g/one_column", [1]),
        helper.make_node("Constant", [], ["g/go"], value=helper.make_tensor("g/go", TensorProto.BOOL, [], [True])),
        helper.make_node("ReduceSum", [ATTENTION_MASK, "g/axis_1"], ["g/real"], keepdims=0),
        helper.make_node("Unsqueeze", ["g/real", "g/axis_1"], ["g/real_1"]),
        helper.make_node("Unsqueeze", ["g/bucket_lengths", "g/axis_0"], ["g/bucket_row"]),
        helper.make_node("GreaterOrEqual", ["g/bucket_row", "g/real_1"], ["g/holds"]),  # [rows, buckets]
        helper.make_node("Cast", ["g/holds"], ["g/holds_n"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["g/holds_n", "g/axis_1"], ["g/holding"], keepdims=0),
        helper.make_node("Shape", ["g/bucket_lengths"], ["g/n_buckets"]),
        helper.make_node("Sub", ["g/n_buckets", "g/holding"], ["g/row_bucket"]),  # the smallest bucket that holds it
        *_runs(len(per_run)),
        const("g/per_run", per_run),
        helper.make_node("Gather", ["g/per_run", "g/row_bucket"], ["g/row_per_run"]),
        helper.make_node("Div", ["g/rank", "g/row_per_run"], ["g/row_run"]),
        helper.make_node("Mul", ["g/row_run", "g/n_keys"], ["g/row_run_key"]),
        helper.make_node("Add", ["g/row_run_key", "g/row_bucket"], ["g/row_group"]),  # bucket and run, one number
        helper.make_node("Unique", ["g/row_group"], ["g/present"], sorted=1),
        helper.make_node("Size", ["g/present"], ["g/trips"]),
        helper.make_node("SequenceEmpty", [], ["g/no_rows"], dtype=TensorProto.INT64),
        *(helper.make_node("SequenceEmpty", [], [f"g/no_{o.name}"], dtype=o.type.tensor_type.elem_type) for o in outputs),
        helper.make_node("Loop", ["g/trips", "g/go", "g/no_rows", *(f"g/no_{o.name}" for o in outputs)],
                         ["g/grouped_rows", *(f"g/grouped_{o.name}" for o in outputs)], body=loop_body),
        helper.make_node("ConcatFromSequence", ["g/grouped_rows"], ["g/order"], axis=0),
        helper.make_node("Unsqueeze", ["g/order", "g/minus_one"], ["g/places"]),
        *(node for o in outputs for node in (
            helper.make_node("ConcatFromSequence", [f"g/grouped_{o.name}"], [f"g/{o.name}_grouped"], axis=0),
            helper.make_node("ScatterND", [f"g/{o.name}_grouped", "g/places", f"g/{o.name}_grouped"], [o.name]))),
    ]
    wrapped = helper.make_graph(main, graph.name or "model", list(graph.input), outputs, list(graph.initializer))
    result = helper.make_model(wrapped, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    onnx.checker.check_model(result, full_check=False)
    return result


def _runs(keys: int) -> list[onnx.NodeProto]:
    """g/rank: each row's place among the rows of its bucket before it; g/n_keys: how many bucket numbers there
    are, so that run x n_keys + bucket names one group."""
    return [
        const("g/n_keys", [keys]),
        helper.make_node("Shape", ["g/row_bucket"], ["g/n_rows"]),
        helper.make_node("Squeeze", ["g/n_rows"], ["g/n_rows_0"]),
        const("g/zero", 0), const("g/one", 1),
        helper.make_node("Range", ["g/zero", "g/n_rows_0", "g/one"], ["g/row_index"]),
        helper.make_node("Unsqueeze", ["g/row_index", "g/axis_1"], ["g/row_index_1"]),  # [rows, 1]
        helper.make_node("Less", ["g/row_index", "g/row_index_1"], ["g/earlier"]),  # [rows, rows]: j before i
        helper.make_node("Unsqueeze", ["g/row_bucket", "g/axis_1"], ["g/row_bucket_1"]),
        helper.make_node("Equal", ["g/row_bucket", "g/row_bucket_1"], ["g/same_bucket"]),
        helper.make_node("And", ["g/earlier", "g/same_bucket"], ["g/earlier_same"]),
        helper.make_node("Cast", ["g/earlier_same"], ["g/earlier_same_n"], to=TensorProto.INT64),
        helper.make_node("ReduceSum", ["g/earlier_same_n", "g/axis_1"], ["g/rank"], keepdims=0),
    ]


def with_model(served: onnx.ModelProto, model: onnx.ModelProto) -> onnx.ModelProto:
    """A served graph with its loop's model swapped for `model`, which has the same inputs and outputs (the bench's
    stand-in, which only fills them): everything else, the tokenizer's nodes and the grouping, as served."""
    out = onnx.ModelProto()
    out.CopyFrom(served)
    loop = next((n for n in out.graph.node if n.op_type == "Loop" and n.output and n.output[0] == "g/grouped_rows"),
                None)
    if loop is None:
        raise ValueError("the served graph runs no bucketed model")
    body = next(a.g for a in loop.attribute if a.name == "body")
    inputs = {i.name: f"group/{i.name}" for i in model.graph.input}
    kept = [n for n in body.node if not any(o.startswith(PREFIX) for o in n.output)]
    at = next(k for k, n in enumerate(kept) if n.op_type == "SequenceInsert")
    swapped = kept[:at] + _renamed(model, inputs) + kept[at:]
    del body.node[:]
    body.node.extend(swapped)
    used = {x for n in out.graph.node for x in n.input} | {x for n in swapped for x in n.input}
    weights = [w for w in out.graph.initializer if w.name in used] + list(model.graph.initializer)
    del out.graph.initializer[:]
    out.graph.initializer.extend(weights)
    onnx.checker.check_model(out, full_check=False)
    return out


def runs_graph(model_graph: Path, buckets: tuple[int, ...], feeds: dict[str, np.ndarray], target: Path,
               atol: float) -> Path:
    """The model's graph run by bucket in runs (`bucketed`), written to `target`, where its answers to `feeds` (rows
    of mixed lengths padded to one width, as a batch reaches the model step) equal the model's own graph's within
    `atol`; refused in one line otherwise."""
    import onnxruntime as ort

    graph = bucketed(onnx.load(str(model_graph)), buckets)
    target.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(graph, str(target))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    plain = ort.InferenceSession(str(model_graph), options, providers=["CPUExecutionProvider"])
    runs = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
    names = [o.name for o in plain.get_outputs()]
    for name, want, got in zip(names, plain.run(None, feeds), runs.run(names, feeds)):
        worst = float(np.abs(np.asarray(want, np.float64) - np.asarray(got, np.float64)).max())
        if want.shape != got.shape or worst > atol:
            raise TritonizeError(f"the model run in runs answers {name} otherwise than its graph ({got.shape} against "
                                 f"{want.shape}, max-abs {worst:.2e} over {atol:g})", hint="generate with --no-model-runs")
    return target
