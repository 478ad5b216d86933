"""ModelSpec -> ONNX (+ onnxruntime transformer fusions, + fp16).

Pooling, L2 normalisation and softmax go inside the graph, so every runtime
(the Python-backend onnxruntime locally, Triton's native backends in the
container, the in-process floor) computes exactly the same outputs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812

from .console import step
from .errors import TritonizeError
from .spec import ModelSpec

# Protobuf cannot hold a model over 2 GiB; switch to external data well below that.
EXTERNAL_DATA_THRESHOLD = 1_500_000_000
EXTERNAL_DATA_SUFFIX = ".data"
# Each stage writes <stage>/model.onnx (+ model.onnx.data): external data is referenced by
# file name inside the graph, so the served name is used from the start.
MODEL_FILE = "model.onnx"


def _stage_path(workdir: Path, stage: str) -> Path:
    (workdir / stage).mkdir(parents=True, exist_ok=True)
    return workdir / stage / MODEL_FILE


@dataclass
class Artifacts:
    """Files produced by export, in the order they were made."""

    onnx: Path  # the graph the repository will serve
    reference_onnx: Path  # the plain fp32 export, verified against PyTorch
    stages: dict[str, Path] = field(default_factory=dict)  # stage name -> file (export, optimize, fp16)
    seconds: dict[str, float] = field(default_factory=dict)
    opset: int = 17

    def files_for(self, onnx_path: Path) -> list[Path]:
        """The graph file and its external data file, if any."""
        data = onnx_path.with_name(onnx_path.name + EXTERNAL_DATA_SUFFIX)
        return [onnx_path, data] if data.exists() else [onnx_path]


class EmbeddingHead(torch.nn.Module):
    """encoder -> pooling (mean over the attention mask, or CLS) -> optional L2 normalisation."""

    def __init__(self, encoder, pooling: str, normalize: bool):
        super().__init__()
        self.encoder, self.pooling, self.normalize = encoder, pooling, normalize

    def forward(self, input_ids, attention_mask):
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
        if self.pooling == "cls":
            pooled = hidden[:, 0]
        else:  # the same arithmetic as sentence-transformers' Pooling(mean)
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
        return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled


class ClassificationHead(torch.nn.Module):
    """logits and their softmax, so clients need no post-processing."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        logits = self.model(input_ids=input_ids, attention_mask=attention_mask).logits
        return logits, torch.softmax(logits, dim=-1)


def load_torch_model(spec: ModelSpec) -> torch.nn.Module:
    """The PyTorch model wrapped so that its outputs are the repository's outputs."""
    from transformers import AutoModel, AutoModelForSequenceClassification

    auto = AutoModel if spec.task == "embedding" else AutoModelForSequenceClassification
    try:
        # Eager attention exports to plain MatMul/Softmax that onnxruntime's optimizer can fuse.
        model = auto.from_pretrained(
            spec.source, attn_implementation="eager", trust_remote_code=spec.trust_remote_code
        )
    except Exception as exc:  # noqa: BLE001
        raise TritonizeError(f"transformers could not load {spec.source}: {exc}") from exc
    model.eval()
    if spec.task == "embedding":
        head: torch.nn.Module = EmbeddingHead(model, spec.pooling or "mean", spec.normalize)
    else:
        head = ClassificationHead(model)
    return head.eval().to(torch.float32)


def _parameter_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def export_onnx(spec: ModelSpec, head, path: Path, opset: int, external_threshold: int = EXTERNAL_DATA_THRESHOLD) -> Path:
    """The legacy TorchScript exporter: fast, and with dynamic batch and sequence axes."""
    import onnx

    if opset < 17:
        raise TritonizeError(f"opset {opset} is too old", hint="use --opset 17 or later")
    # A padded second row keeps the exporter from specialising on an all-ones mask.
    input_ids = torch.tensor([[101, 2023, 2003, 1037, 3231, 102, 0, 0], [101, 2178, 6251, 2182, 2062, 2616, 1012, 102]])
    input_ids = input_ids.clamp(max=head_vocab_size(head) - 1)
    attention_mask = (input_ids != 0).long()
    attention_mask[:, 0] = 1
    axes = {name: {0: "batch", 1: "sequence"} for name in spec.input_names}
    axes.update({name: {0: "batch"} for name in spec.output_names})
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            head,
            (input_ids, attention_mask),
            str(path),
            input_names=list(spec.input_names),
            output_names=list(spec.output_names),
            dynamic_axes=axes,
            opset_version=opset,
            do_constant_folding=True,
            dynamo=False,
        )
    if _parameter_bytes(head) > external_threshold:
        save_onnx(onnx.load(str(path)), path, external=True)
    return path


def head_vocab_size(head) -> int:
    module = getattr(head, "encoder", None) or getattr(head, "model", None)
    return int(getattr(module.config, "vocab_size", 30522))


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


def export(
    spec: ModelSpec,
    workdir: Path,
    *,
    opset: int = 17,
    optimize: bool = False,
    fp16: bool = False,
    use_gpu: bool = False,
    head=None,
    external_threshold: int = EXTERNAL_DATA_THRESHOLD,
) -> Artifacts:
    """Run every export stage into `workdir`; the last stage is what gets served."""
    workdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    if head is None:
        with step(f"Loading {spec.architecture} from {spec.source}"):
            head = load_torch_model(spec)
    external = _parameter_bytes(head) > external_threshold
    t = time.perf_counter()
    with step(f"Exporting to ONNX (opset {opset})"):
        reference = export_onnx(spec, head, workdir / "export" / MODEL_FILE, opset, external_threshold)
    seconds["export"] = time.perf_counter() - t
    stages = {"export": reference}
    current = reference
    if optimize:
        t = time.perf_counter()
        with step("Optimizing with onnxruntime transformer fusions" + (" and fp16" if fp16 else "")):
            current = optimize_onnx(spec, reference, _stage_path(workdir, "optimize"), use_gpu, fp16, external)
        seconds["optimize"] = time.perf_counter() - t
        stages["optimize"] = current
    elif fp16:
        t = time.perf_counter()
        with step("Converting to fp16"):
            current = convert_fp16(reference, _stage_path(workdir, "fp16"), external)
        seconds["fp16"] = time.perf_counter() - t
        stages["fp16"] = current
    return Artifacts(onnx=current, reference_onnx=reference, stages=stages, seconds=seconds, opset=opset)
