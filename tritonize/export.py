"""ModelSpec -> ONNX (+ onnxruntime transformer fusions, + fp16).

The task wraps the model so that its head (pooling, normalisation, softmax)
is inside the graph: every runtime (the Python-backend onnxruntime locally,
Triton's native backends in the container, the in-process floor) computes
exactly the same outputs.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import tasks
from .console import phase
from .errors import TritonizeError
from .serving.batching import ATTENTION_MASK, INPUT_IDS, SCORE_MASK, TOKEN_TYPE_IDS
from .spec import MODEL_FILE, ModelSpec

# Protobuf cannot hold a model over 2 GiB; switch to external data well below that.
EXTERNAL_DATA_THRESHOLD = 1_500_000_000
EXTERNAL_DATA_SUFFIX = ".data"
# Each stage writes <stage>/model.onnx (+ model.onnx.data): external data is referenced by
# file name inside the graph, so the served name (MODEL_FILE) is used from the start.


def _stage_path(workdir: Path, stage: str) -> Path:
    (workdir / stage).mkdir(parents=True, exist_ok=True)
    return workdir / stage / MODEL_FILE


@dataclass
class Artifacts:
    """Files produced by export, in the order they were made."""

    onnx: Path  # the graph the repository will serve
    stages: dict[str, Path] = field(default_factory=dict)  # stage name -> file (export, optimize, fp16)
    seconds: dict[str, float] = field(default_factory=dict)

    def files_for(self, onnx_path: Path) -> list[Path]:
        """The graph file and its external data file, if any."""
        data = onnx_path.with_name(onnx_path.name + EXTERNAL_DATA_SUFFIX)
        return [onnx_path, data] if data.exists() else [onnx_path]


def load_torch_model(spec: ModelSpec) -> torch.nn.Module:
    """The PyTorch model, wrapped by its task so that its outputs are the repository's outputs."""
    return tasks.of(spec.head).exporter.load(spec).to(torch.float32)


def _parameter_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@contextlib.contextmanager
def traceable_masks():
    """transformers builds an attention mask from a custom mask function (Gemma 3's bidirectional and
    sliding-window overlays) with torch.vmap, which the TorchScript tracer cannot record. Those functions are
    index-based, so broadcasting the index ranges (transformers' own non-vmap path) computes the same mask;
    verification compares the result with the model's own library. Exports use eager attention, whose mask
    `eager_mask` builds through `sdpa_mask`."""
    from transformers import masking_utils

    original = masking_utils.sdpa_mask

    def broadcast_mask(*args, **kwargs):
        return original(*args, **{**kwargs, "use_vmap": False})

    masking_utils.sdpa_mask = broadcast_mask
    try:
        yield
    finally:
        masking_utils.sdpa_mask = original


def export_onnx(spec: ModelSpec, graph, path: Path, opset: int, external_threshold: int = EXTERNAL_DATA_THRESHOLD) -> Path:
    """The legacy TorchScript exporter: fast, and with dynamic batch and sequence axes."""
    import onnx

    if opset < 17:
        raise TritonizeError(f"opset {opset} is too old", hint="use --opset 17 or later")
    # A padded second row keeps the exporter from specialising on an all-ones mask.
    input_ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102, 0, 0], [101, 2178, 6251, 2182, 2062, 2616, 1012, 102]])
    input_ids = input_ids.clamp(max=graph_vocab_size(graph) - 1)
    attention_mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0, 0], [1] * 8])
    token_type_ids = torch.tensor([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1]])  # a pair's second segment
    # Scored tokens with gaps, and past the attention mask (a late-interaction query's expansion).
    score_mask = torch.tensor([[1, 0, 1, 1, 1, 1, 1, 0], [1, 1, 0, 1, 1, 0, 1, 1]])
    dummy = {INPUT_IDS: input_ids, ATTENTION_MASK: attention_mask, TOKEN_TYPE_IDS: token_type_ids, SCORE_MASK: score_mask}
    axes = {name: {0: "batch", 1: "sequence"} for name in spec.input_names}
    graph_outputs = tasks.of(spec.head).ensemble.graph_outputs(spec.head)
    output_names = [t.name for t in graph_outputs]
    # Per-token outputs (dims starting with -1) keep the sequence axis dynamic too.
    axes.update({t.name: {0: "batch", 1: "sequence"} if t.dims[:1] == (-1,) else {0: "batch"} for t in graph_outputs})
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad(), traceable_masks():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            graph,
            tuple(dummy[n] for n in spec.input_names),
            str(path),
            input_names=list(spec.input_names),
            output_names=list(output_names),
            dynamic_axes=axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    pin_output_dims(path, graph_outputs)
    if _parameter_bytes(graph) > external_threshold:
        save_onnx(onnx.load(str(path)), path, external=True)
    return path


def pin_output_dims(path: Path, outputs) -> None:
    """Write each output's fixed sizes into the graph where the tracer left a symbolic name (an embedding's
    `Divembedding_dim_1`). Triton's native onnxruntime backend compares the model step's config with the session's
    output shapes exactly, and onnxruntime resolves such a name at load for some heads (mean pooling) but not for
    others (CLS or last-token pooling): their model step failed to load on the production configs."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    declared = {o.name: o.type.tensor_type.shape.dim for o in model.graph.output}
    pinned = False
    for tensor in outputs:
        dims = declared[tensor.name]
        for axis, size in enumerate(tensor.dims, start=1):  # axis 0 is the batch
            if size > 0 and axis < len(dims) and not dims[axis].HasField("dim_value"):
                dims[axis].Clear()
                dims[axis].dim_value = size
                pinned = True
    if pinned:
        onnx.save_model(model, str(path))


def graph_vocab_size(graph) -> int:
    """Every task's wrapper keeps the transformers model as `.model`."""
    return int(getattr(graph.model.config, "vocab_size", 30522))


def save_onnx(model, path: Path, external: bool) -> None:
    import onnx

    data = path.with_name(path.name + EXTERNAL_DATA_SUFFIX)
    if data.exists():
        data.unlink()
    if external:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name)
    else:
        onnx.save_model(model, str(path))


def optimize_onnx(spec: ModelSpec, source: Path, path: Path, use_gpu: bool, fp16: bool, external: bool) -> Path:
    """onnxruntime's transformer optimizer (Attention/LayerNorm/GELU fusions), optionally to fp16."""
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(spec.source, trust_remote_code=spec.trust_remote_code)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = optimize_model(
            str(source),
            model_type="bert",
            num_heads=int(getattr(cfg, "num_attention_heads", 0) or getattr(cfg, "n_heads", 0) or 0),
            hidden_size=int(getattr(cfg, "hidden_size", 0) or getattr(cfg, "dim", 0) or 0),
            use_gpu=use_gpu,
        )
        if fp16:
            model.convert_float_to_float16(keep_io_types=True)
    save_onnx(model.model, path, external)
    return path


def convert_fp16(source: Path, path: Path, external: bool) -> Path:
    """fp16 weights and compute, fp32 inputs and outputs (keep_io_types)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = convert_float_to_float16(onnx.load(str(source)), keep_io_types=True)
    save_onnx(model, path, external)
    return path


def quantize_int8(source: Path, path: Path) -> Path:
    """onnxruntime's dynamic quantization: int8 weights of every MatMul, one scale per output channel, activations
    quantized at run time. Per-channel scales keep the per-text cosine of small encoders above 0.96 where
    per-tensor scales fall to 0.55-0.77 (all-MiniLM-L6-v2, the shipped corpus); gathers (the embedding tables)
    stay fp32."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(
            str(source), str(path), weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=["MatMul"],
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},  # shapes through contrib ops of fused graphs
        )
    return path


def export(
    spec: ModelSpec,
    workdir: Path,
    *,
    opset: int = 17,
    optimize: bool = False,
    fp16: bool = False,
    int8: bool = False,
    use_gpu: bool = False,
    graph=None,
    external_threshold: int = EXTERNAL_DATA_THRESHOLD,
) -> Artifacts:
    """Run every export stage into `workdir`; the last stage is what gets served."""
    workdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    if graph is None:
        with phase(f"Loading {spec.architecture} from {spec.source}"):
            graph = load_torch_model(spec)
    external = _parameter_bytes(graph) > external_threshold
    t = time.perf_counter()
    with phase(f"Exporting to ONNX (opset {opset})"):
        path = workdir / "export" / MODEL_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        own = tasks.of(spec.head).exporter.export_graph(spec, graph, path, opset)
        reference = own or export_onnx(spec, graph, path, opset, external_threshold)
    seconds["export"] = time.perf_counter() - t
    stages = {"export": reference}
    current = reference
    if optimize:
        t = time.perf_counter()
        with phase("Optimizing with onnxruntime transformer fusions" + (" and fp16" if fp16 else "")):
            current = optimize_onnx(spec, reference, _stage_path(workdir, "optimize"), use_gpu, fp16, external)
        seconds["optimize"] = time.perf_counter() - t
        stages["optimize"] = current
    elif fp16:
        t = time.perf_counter()
        with phase("Converting to fp16"):
            current = convert_fp16(reference, _stage_path(workdir, "fp16"), external)
        seconds["fp16"] = time.perf_counter() - t
        stages["fp16"] = current
    if int8:
        t = time.perf_counter()
        with phase("Quantizing to int8 (dynamic, per channel)"):
            current = quantize_int8(current, _stage_path(workdir, "int8"))
        seconds["int8"] = time.perf_counter() - t
        stages["int8"] = current
    return Artifacts(onnx=current, stages=stages, seconds=seconds)
