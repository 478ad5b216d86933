"""`tritonize bench --stand-in`: the host CPU a request costs around the model, on the repository as served.

On a GPU the model step takes so little time per row that the CPU around it decides how many rows one GPU can
be fed: Triton's gRPC and ensemble, the tokenizer step, the statistics step, the HTTP API. To measure that on any
machine, the run serves a shadow copy of the repository (bench/shadow.py) whose model step's graph is a stand-in:
the same inputs and outputs (names, types, shapes) as the real graph, each output only filled, so it costs next
to nothing. A float output holds the same varied values on every row (asgi_floor.answer_values), so that writing
it as JSON costs what a real answer's does. Everything else is what the repository serves in production: its
configs, the tokenizer and statistics steps, the model step on Triton's native onnxruntime backend. The figures
are CPU per request and per row by process; CPU seconds per row times the rows one H100 computes per second
(`H100_ROWS_PER_S`) is the host cores one H100 needs.

The empty ensemble beside it is what Triton itself costs per request on this CPU: one step, a stand-in graph on
the native backend that takes the texts and answers one number per row, behind an ensemble, over gRPC.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..errors import TritonizeError
from ..repository import config_as_triton_passes_it, parse_config
from ..runtime.base import ServerOptions
from ..runtime.machine import free_ports
from ..serving.batching import bucket_for, parse_buckets
from ..serving.tokenizer import parameters
from ..spec import CONFIG_FILE, FIRST, MODEL_FILE, PRODUCTION_VARIANT, repo_paths
from . import api_costs, corpus, cpu, load, server_counters
from .asgi_floor import answer_values
from .measured import measured_model, record, say_run
from .options import BenchOptions
from .runner import Bench
from .shadow import shadow_repository

# Rows per second of all-MiniLM-L6-v2's model step alone, {(batch, tokens per row): rows/s}, measured once on one
# NVIDIA H100 with the GPU kit (fp16, onnxruntime's GPU fusions). Nothing here measures a
# GPU: these are the rate the host must feed.
H100_ROWS_PER_S: dict[tuple[int, int], float] = {
    (64, 16): 67_500.0, (64, 128): 48_500.0, (64, 256): 30_400.0,
    (128, 16): 171_800.0, (256, 16): 234_000.0, (256, 128): 75_900.0,
}
# The batch the cores are computed at: the one batch size measured at every length (16, 128 and 256 tokens), and
# the CPU repositories' max batch. A GPU repository batches up to 256 rows (spec.GPU_DEFAULTS), where the H100 ran
# 3.5x (16 tokens) and 1.6x (128 tokens) the rows/s of batch 64: fed at that rate, the host needs that many times
# the cores computed here.
H100_BATCH = 64
TEXTS_PER_REQUEST = (1, 64)  # single texts, and requests of 64 (the generated repositories' max batch)
CONCURRENCY = [8, 64]  # single texts are held to their targets at 64 clients, requests of 64 texts at 8
PROTOCOLS = ["grpc", "api"]
EMPTY_SYSTEM = "triton-empty"
EMPTY, EMPTY_STEP, EMPTY_OUTPUT = "empty", "empty_step", "OUT"
EMPTY_LABEL = "empty ensemble"  # over gRPC


# -- the stand-in graph -------------------------------------------------------------


def fill_graph(inputs: Sequence, outputs: Sequence, opset: int, sizes: Mapping[str, Sequence[int]] | None = None):
    """A graph that takes `inputs` and fills each of `outputs` (ValueInfoProtos): a float output's every row with
    answer_values of its last axis' size, any other output with ones. An axis an input names (batch, sequence) is
    read from that input's shape, a fixed one is its size, and a symbolic one no input names is `sizes[output]` at
    that axis (a step's config dims, batch excluded)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    axes: dict[str, tuple[str, int]] = {}
    for i in inputs:
        for axis, d in enumerate(i.type.tensor_type.shape.dim):
            if d.dim_param:
                axes.setdefault(d.dim_param, (i.name, axis))
    nodes, made = [], set()

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        if out not in made:
            made.add(out)
            nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def size(value: int) -> str:
        return node("Constant", [], f"stand_in/size_{value}", value=helper.make_tensor("v", TensorProto.INT64, [1], [value]))

    for out in outputs:
        t = out.type.tensor_type
        if t.elem_type == TensorProto.STRING:
            raise TritonizeError(f"the stand-in cannot answer {out.name}: it fills numbers, and {out.name} is text")
        parts, width = [], None  # width: the last axis' size, where the graph or the config fixes it
        for axis, d in enumerate(t.shape.dim):
            fixed = (sizes or {}).get(out.name)
            if d.HasField("dim_value"):
                parts.append(size(width := d.dim_value))
            elif d.dim_param in axes:
                name, at = axes[d.dim_param]
                parts.append(node("Shape", [name], f"stand_in/{name}_axis{at}", start=at, end=at + 1))
                width = None
            elif fixed is not None and 0 < axis <= len(fixed) and fixed[axis - 1] > 0:
                parts.append(size(width := fixed[axis - 1]))
            else:
                raise TritonizeError(f"the stand-in cannot size {out.name}'s axis {axis} "
                                     f"({d.dim_param or 'unnamed'}): no input has it, and no config fixes it")
        dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
        shape = node("Concat", parts, f"stand_in/{out.name}_shape", axis=0)
        if np.issubdtype(dtype, np.floating):  # each row the same varied values (an axis of unknown size: the first)
            row = answer_values(width or 1).astype(dtype)
            values = node("Constant", [], f"stand_in/{out.name}_row", value=numpy_helper.from_array(row, "row"))
            node("Expand", [values, shape], out.name)
        else:
            node("ConstantOfShape", [shape], out.name, value=numpy_helper.from_array(np.array([1], dtype=dtype), "fill"))
    graph = helper.make_graph(nodes, "stand_in", list(inputs), list(outputs))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", max(opset, 15))],  # Shape's start, end
                              producer_name="tritonize stand-in")
    onnx.checker.check_model(model)
    return model


def stand_in_graph(real, sizes: Mapping[str, Sequence[int]] | None = None):
    """A graph with `real`'s inputs and outputs (names, types, shapes) that only fills its outputs."""
    weights = {w.name for w in real.graph.initializer}
    inputs = [i for i in real.graph.input if i.name not in weights]
    opset = next((o.version for o in real.opset_import if o.domain in ("", "ai.onnx")), 17)
    model = fill_graph(inputs, real.graph.output, opset, sizes)
    model.ir_version = min(model.ir_version, real.ir_version)  # what loads the real graph loads this one
    return model


def stand_in_after_tokenizer(composed, plain, sizes: Mapping[str, Sequence[int]] | None = None):
    """The stand-in of a graph that tokenizes inside (graph_tokenizer/): its tokenizer's nodes and the grouping of
    its rows by bucket as served, with a fill of the model's outputs where the model ran, so the run still pays for
    tokenizing. `plain` is the model's graph the served one runs; refused where it runs none."""
    from ..graph_tokenizer.bucketed import with_model

    try:
        return with_model(composed, stand_in_graph(plain, sizes))
    except ValueError:
        raise TritonizeError("--stand-in cannot find the model's graph after the tokenizer's in the served graph") from None


def model_step_config(repo: Path, name: str):
    """The model step's production config; refused in one line where the native onnxruntime backend does not
    run a graph file there."""
    path = repo_paths(repo, name)["model"] / CONFIG_FILE
    config = parse_config(path.read_text(), str(path))
    if config.platform != "onnxruntime_onnx":
        raise TritonizeError(f"--stand-in replaces the graph Triton's onnxruntime backend runs in the model step; "
                             f"{config.name}'s production config runs {config.platform or config.backend}")
    return config


def write_stand_in(repo: Path, target: Path, name: str) -> Path:
    """A shadow copy of `repo` whose model step of `name` serves the stand-in of each version's graph (every other
    model as it is: the API checks them all before it answers)."""
    import onnx

    from ..graph_tokenizer import DOMAIN as TOKENIZER_DOMAIN  # the in-graph tokenizer's operators

    config = model_step_config(repo, name)
    shutil.rmtree(target, ignore_errors=True)
    shadow = shadow_repository(repo, target)
    graph_file = config.default_model_filename or MODEL_FILE
    sizes = {o.name: list(o.dims) for o in config.output}
    folders = [v for v in repo_paths(shadow, name)["model"].iterdir() if v.name.isdigit() and (v / graph_file).exists()]
    if not folders:
        raise TritonizeError(f"no {graph_file} in a version folder of {config.name}")
    for version in folders:
        real = onnx.load(str(version / graph_file), load_external_data=False)
        if any(o.domain == TOKENIZER_DOMAIN for o in real.opset_import):
            # The model's own graph beside it (the fused variant's, and the bench's floor's) is stood in too, so
            # that every reader of the shadow copy answers the same fill.
            plain = onnx.load(str(version / MODEL_FILE), load_external_data=False)
            stand_ins = {graph_file: stand_in_after_tokenizer(real, plain, sizes), MODEL_FILE: stand_in_graph(plain, sizes)}
        else:
            stand_ins = {graph_file: stand_in_graph(real, sizes)}
            if graph_file != MODEL_FILE and (version / MODEL_FILE).exists():  # the plain graph beside the one in runs
                plain = onnx.load(str(version / MODEL_FILE), load_external_data=False)
                stand_ins[MODEL_FILE] = stand_in_graph(plain, sizes)
        for file, graph in stand_ins.items():
            (version / file).unlink()  # a link to the real graph: the real one stays as it is
            onnx.save(graph, str(version / file))
    return shadow


# -- the empty ensemble ---------------------------------------------------------------


def write_empty(repo: Path, target: Path, name: str) -> Path:
    """A repository of one ensemble that takes `name`'s texts and answers one number per row from one step, a
    fill graph on the native onnxruntime backend, batched as `name`'s model step is (same max batch, queue,
    instances and threads)."""
    import onnx
    from google.protobuf import text_format
    from onnx import TensorProto, helper
    from tritonclient.grpc import model_config_pb2 as mc

    paths = repo_paths(repo, name)
    ensemble = parse_config((paths["ensemble"] / CONFIG_FILE).read_text())
    model = model_step_config(repo, name)
    step = mc.ModelConfig()
    step.CopyFrom(model)
    step.name, step.default_model_filename = EMPTY_STEP, MODEL_FILE
    del step.input[:], step.output[:], step.model_warmup[:]
    step.ClearField("model_operations")  # a fill graph: no operator library (an in-graph tokenizer's)
    step.dynamic_batching.ClearField("default_queue_policy")  # no timeouts: Triton's stalls show as latency here
    step.input.extend(ensemble.input)
    step.output.add(name=EMPTY_OUTPUT, data_type=mc.TYPE_INT32, dims=[1])
    whole = mc.ModelConfig()
    whole.CopyFrom(ensemble)
    whole.name = EMPTY
    del whole.output[:]
    whole.output.extend(step.output)
    whole.ensemble_scheduling.Clear()
    call = whole.ensemble_scheduling.step.add(model_name=EMPTY_STEP, model_version=-1)
    for i in whole.input:
        call.input_map[i.name] = i.name
    call.output_map[EMPTY_OUTPUT] = EMPTY_OUTPUT
    version = str(next(iter(model.version_policy.specific.versions), 1))
    shutil.rmtree(target, ignore_errors=True)
    for config in (step, whole):
        (target / config.name / version).mkdir(parents=True)
        (target / config.name / CONFIG_FILE).write_text(text_format.MessageToString(config))
    texts = [helper.make_tensor_value_info(i.name, TensorProto.STRING, ["batch", 1]) for i in ensemble.input]
    answer = helper.make_tensor_value_info(EMPTY_OUTPUT, TensorProto.INT32, ["batch", 1])
    onnx.save(fill_graph(texts, [answer], 17), str(target / EMPTY_STEP / version / MODEL_FILE))
    return target


# -- what one H100 computes ------------------------------------------------------------


def h100_rows_per_s(tokens: int, batch: int = H100_BATCH) -> float:
    """Rows/s of one H100 at `batch` for rows of `tokens`: the time per row is interpolated linearly between the
    measured lengths, held at the shortest below it, and grows in proportion to the tokens past the longest."""
    if (batch, tokens) in H100_ROWS_PER_S:
        return H100_ROWS_PER_S[batch, tokens]
    points = sorted((t, 1.0 / rate) for (b, t), rate in H100_ROWS_PER_S.items() if b == batch)
    if not points:
        raise TritonizeError(f"no H100 figure at batch {batch}", hint=f"measured: {sorted(H100_ROWS_PER_S)}")
    if tokens <= points[0][0]:
        return 1.0 / points[0][1]
    for (t0, s0), (t1, s1) in zip(points, points[1:]):
        if tokens <= t1:
            return 1.0 / (s0 + (tokens - t0) / (t1 - t0) * (s1 - s0))
    last_t, last_s = points[-1]
    return 1.0 / (last_s * tokens / last_t)


def workload_rows_per_s(row_lengths: Sequence[Sequence[int]], texts: int, buckets: Sequence[int]) -> float:
    """Texts per second one H100 computes for a workload sent `texts` to a request: the tokenizer step pads a
    request's model rows to the bucket of its longest, and each row then costs the GPU that length's time
    (`h100_rows_per_s`); the workload's GPU time summed, divided among its texts. Rows of one length get that
    length's figure; mixed lengths sent one to a request weigh each bucket by the rows it holds, and sent 64 to a
    request mostly pay for their longest."""
    seconds = 0.0
    for request in load.requests_of(list(row_lengths), texts):
        rows = [n for lengths in load.rows_in(request, texts) for n in lengths]
        longest = max(rows)
        seconds += len(rows) / h100_rows_per_s(bucket_for(longest, buckets) if buckets else longest)
    return len(row_lengths) * texts / seconds


def buckets_of(repo: Path, name: str) -> list[int]:
    """The buckets the first step pads rows to (none where it pads each request to its longest row)."""
    config = config_as_triton_passes_it(repo_paths(repo, name)[FIRST.key] / CONFIG_FILE)
    given = parameters(config).get("buckets")
    return parse_buckets(given) if given else []


# -- the figures --------------------------------------------------------------------------


def host_cpu(run: dict, h100_rate: float) -> dict | None:
    """One measurement's CPU per request and per row by process (µs), the server's total, and the host cores one
    H100 needs to be fed at `h100_rate` rows/s: server CPU seconds per row x that rate. The model step's own
    share is Triton's execution time of it (an upper bound on its CPU: one onnxruntime thread per instance)."""
    used = (run.get("cpu") or {}).get("cpu_s")
    done = (run.get("cpu") or {}).get("completed")
    if not used or not done:
        return None
    rows = done * run["texts_per_request"]
    server = {k: v for k, v in used.items() if k != cpu.CLIENT}
    total = sum(server.values())
    model = (run.get("steps") or {}).get("model", {}).get("busy_ms")
    return {
        "us_per_request": {k: round(1e6 * v / done, 1) for k, v in used.items()},
        "us_per_row": {k: round(1e6 * v / rows, 2) for k, v in used.items()},
        "server_us_per_request": round(1e6 * total / done, 1),
        "server_us_per_row": round(1e6 * total / rows, 2),
        "model_us_per_row": None if model is None else round(1e3 * model / rows, 2),
        "h100_rows_per_s": round(h100_rate),
        "cores_per_h100": round(total / rows * h100_rate, 2),
        "cores_by_process": {k: round(v / rows * h100_rate, 2) for k, v in server.items()},
    }


def check_options(o: BenchOptions) -> None:
    """What a stand-in run cannot do, refused in one line before anything starts."""
    if o.variant != PRODUCTION_VARIANT:
        raise TritonizeError(f"--stand-in measures the production variant (the model step on Triton's native "
                             f"onnxruntime backend); --variant {o.variant} runs the graph in a Python step",
                             hint="drop --variant")
    if o.compare or o.compare_variants:
        raise TritonizeError("--stand-in measures one repository", hint="drop --compare and --compare-variant")
    if o.peers:
        raise TritonizeError("--stand-in measures Triton alone: the peers run the real model",
                             hint="drop --peers (or pass --peers none)")
    if corpus.IMAGES in o.workloads:
        raise TritonizeError(f"--stand-in measures texts: its rates are rows of tokens, and no {corpus.IMAGES}",
                             hint=f"drop {corpus.IMAGES} from --workloads")


def run(options: BenchOptions) -> dict:
    """The repository served with the stand-in (gRPC, and the API where asked), then the empty ensemble over
    gRPC, on the same rows; every measurement's figures under "host_cpu", by workload."""
    check_options(options)
    work, repo = Path(options.output) / ".run", Path(options.repository)
    name = measured_model(repo, options.model).name
    shadow = write_stand_in(repo, work / "stand-in", name)
    bench = StandInBench(dataclasses.replace(options, repository=shadow, start_local=True))
    if "api" in options.protocols and not options.protocols_asked and not bench.api_measured():
        bench.o.protocols = [p for p in options.protocols if p != "api"]  # the default asks for it where it serves
    bench.say(f"[bold]Stand-in[/]: {name}'s model step answers from a graph that only fills its outputs ({shadow})")
    document = bench.run()
    empty = measure_empty(bench, write_empty(repo, work / "empty", name))
    api = any(p.startswith("api") for p in bench.o.protocols)
    floor = api_costs.measure_floor(bench, bench.manifest.model.head.dim) if api else []
    buckets = buckets_of(repo, name)
    rates = {(w, n): workload_rows_per_s(bench.workloads[w].row_lengths, n, buckets)
             for w in bench.workloads for n in options.texts_per_request}
    for r in document["runs"] + empty + floor:
        figures = host_cpu(r, rates[r["workload"], r["texts_per_request"]])
        if figures:
            r["host_cpu"] = figures
    document["empty"] = empty
    document[api_costs.FLOOR_KEY] = floor
    document["targets"] = api_costs.targets(document)  # the API's; Triton's targets are for the real model
    document["stand_in"] = {
        "h100_rows_per_s": {f"{b}x{t}": rate for (b, t), rate in H100_ROWS_PER_S.items()},
        "h100_batch": H100_BATCH,
        "workload_h100_rows_per_s": {f"{w} x{n}": round(r) for (w, n), r in rates.items()},
        "buckets": buckets,
        "empty_ensemble": f"{EMPTY} -> {EMPTY_STEP} (a fill graph on the native onnxruntime backend)",
    }
    document["meta"]["stand_in"] = True
    return document


class StandInBench(Bench):
    """A run that also measures, with the API up, what a request it refuses costs it (bench/api_costs.py)."""

    def after_protocol(self, protocol: str, meter: cpu.CpuMeter | None) -> None:
        if protocol == "api":
            api_costs.measure_refusals(self, meter)


def measure_empty(bench: Bench, repo: Path) -> list[dict]:
    """The empty ensemble on its own local server, over gRPC: every workload, request size and concurrency."""
    from ..runtime.local import LocalRuntime

    o = bench.o
    http, grpc, metrics = free_ports(3)
    server = ServerOptions(repository=repo, http_port=http, grpc_port=grpc, metrics_port=metrics,
                           run_dir=Path(o.output) / ".run")
    runs = []
    bench.say(f"[bold]Empty ensemble[/] ({repo}, a local server): what Triton costs per request here")
    runtime = LocalRuntime(server, quiet=o.quiet, variant=PRODUCTION_VARIANT)
    with runtime as endpoints:
        meter = cpu.CpuMeter(runtime.server_pid)
        snaps = server_counters.Snapshots(endpoints.http, [EMPTY, EMPTY_STEP])
        for wname, w in bench.workloads.items():
            request = corpus.request_of(bench.task.contract, w)
            for n in o.texts_per_request:
                requests = load.requests_of(w.rows, n)
                for c in o.concurrency:
                    result = load.measure(lambda: load.TritonGrpc(endpoints.grpc, EMPTY, request, o.timeout_s, n),
                                          requests, c, o.bound(c), lambda: (snaps.start(), meter.start()))
                    used = meter.finish(result.completed, result.client_cpu_s, result.wall_s)
                    deltas = snaps.finish(expected=result.completed)
                    steps = {"ensemble": deltas[EMPTY].to_dict(), "model": deltas[EMPTY_STEP].to_dict()}
                    runs.append(record(EMPTY_SYSTEM, EMPTY_LABEL, wname, result, {"cpu": used, "steps": steps}, n))
                    bench.say(say_run(runs[-1]))
    return runs
