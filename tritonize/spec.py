"""Typed specs passed between stages: model -> artifacts -> repository -> server.

Every decision (names, dtypes, bucket lengths, batching) is made here or in
`source.py`, once; templates only lay these objects out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Task = Literal["embedding", "classification"]
Pooling = Literal["mean", "cls"]
Device = Literal["cpu", "gpu"]
Precision = Literal["fp32", "fp16"]

TASKS: tuple[str, ...] = ("embedding", "classification")
DEVICES: tuple[str, ...] = ("cpu", "gpu")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16")

# Name of the custom model configuration that selects the Python-backend
# (onnxruntime-in-Python) runtime for the local server: configs/local.pbtxt.
LOCAL_CONFIG_NAME = "local"
TEXT_INPUT = "TEXT"
DEFAULT_BUCKET_LADDER = (16, 32, 64, 128, 256, 512)


@dataclass(frozen=True)
class TensorSpec:
    """One tensor as Triton sees it (dims exclude the batch dimension)."""

    name: str
    triton_type: str  # e.g. TYPE_INT64, TYPE_FP32, TYPE_STRING
    dims: tuple[int, ...]
    label_filename: str | None = None

    @property
    def dims_text(self) -> str:
        return "[ " + ", ".join(str(d) for d in self.dims) + " ]"


@dataclass(frozen=True)
class ModelSpec:
    """What the source model is: decided once by `source.read_model`."""

    source: str  # local directory the model was read from
    task: Task
    max_length: int
    input_names: tuple[str, ...]  # ONNX / Triton inputs, e.g. input_ids, attention_mask
    hidden_size: int
    architecture: str
    model_type: str
    pooling: Pooling | None = None  # embedding only
    normalize: bool = False  # embedding only
    labels: tuple[str, ...] = ()  # classification only, index order
    tokenizer_file: str = "tokenizer.json"  # absolute path after read_model
    sentence_transformers_dir: str | None = None  # the folder with modules.json, when there is one
    trust_remote_code: bool = False

    @property
    def output_names(self) -> tuple[str, ...]:
        return ("embedding",) if self.task == "embedding" else ("logits", "probabilities")

    @property
    def output_dim(self) -> int:
        return self.hidden_size if self.task == "embedding" else len(self.labels)


@dataclass
class GenerateOptions:
    """Every user-facing option of `tritonize generate` (CLI flags and YAML keys).

    Written back into the repository as `tritonize.yaml`, so a repository can
    be regenerated and diffed.
    """

    model: str = ""
    task: str | None = None
    name: str | None = None
    max_length: int | None = None
    pooling: str | None = None  # embedding: override the declared pooling (mean|cls)
    normalize: bool | None = None  # embedding: override the declared L2 normalisation
    output: str = "triton_repo"
    device: str = "cpu"
    precision: str = "fp32"
    optimize: bool = False
    tensorrt: bool = False
    max_batch_size: int = 64
    # 0: no wait at low load (each step would add the full delay); batches still form under load
    # because requests queue while an instance is busy. `tritonize tune` measures the alternatives.
    max_queue_delay_us: int = 0
    tokenizer_instances: int = 1
    model_instances: int = 1
    buckets: list[int] | None = None
    opset: int = 17
    trust_remote_code: bool = False
    force: bool = False
    skip_verify: bool = False
    atol: float = 1e-4
    min_cosine_fp16: float = 0.999

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class StepSpec:
    """One Triton model of the repository: batching and placement."""

    name: str
    max_batch_size: int
    max_queue_delay_us: int
    instance_count: int
    kind: str  # KIND_CPU / KIND_GPU


@dataclass(frozen=True)
class RepoSpec:
    """What the repository will be: names, tensors, steps and runtime choices."""

    name: str  # the ensemble, which users call
    model: ModelSpec
    tokenizer_step: StepSpec
    model_step: StepSpec
    buckets: tuple[int, ...]
    device: Device = "cpu"
    precision: Precision = "fp32"
    tensorrt: bool = False
    onnx_file: str = "model.onnx"
    labels_file: str = "labels.txt"
    max_batch_size: int = 64
    pad_token_id: int = 0

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer_step.name

    @property
    def model_name(self) -> str:
        return self.model_step.name

    @property
    def token_inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(n, "TYPE_INT64", (-1,)) for n in self.model.input_names)

    @property
    def text_input(self) -> TensorSpec:
        return TensorSpec(TEXT_INPUT, "TYPE_STRING", (1,))

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        # fp16 graphs keep fp32 inputs/outputs (keep_io_types), so clients never see fp16.
        float_type = "TYPE_FP32"
        dim = (self.model.output_dim,)
        if self.model.task == "embedding":
            return (TensorSpec("embedding", float_type, dim),)
        return (
            TensorSpec("logits", float_type, dim, label_filename=self.labels_file),
            TensorSpec("probabilities", float_type, dim, label_filename=self.labels_file),
        )


def default_buckets(max_length: int, ladder: tuple[int, ...] = DEFAULT_BUCKET_LADDER) -> tuple[int, ...]:
    """Padding lengths: powers of two below max_length, then max_length itself.

    Triton's dynamic batcher only merges requests whose tensors have equal
    shapes, so a few fixed lengths let requests batch while wasting little
    compute on padding.
    """
    return tuple(b for b in ladder if b < max_length) + (max_length,)


def normalise_buckets(buckets: list[int] | tuple[int, ...] | None, max_length: int) -> tuple[int, ...]:
    if not buckets:
        return default_buckets(max_length)
    kept = sorted({int(b) for b in buckets if 0 < int(b) <= max_length})
    if not kept or kept[-1] != max_length:
        kept.append(max_length)
    return tuple(kept)


def repo_paths(output: str | Path, name: str) -> dict[str, Path]:
    """Where each model lives inside a repository (one place for the layout)."""
    root = Path(output)
    return {
        "root": root,
        "ensemble": root / name,
        "tokenizer": root / f"{name}_tokenizer",
        "model": root / f"{name}_model",
    }


__all__ = [
    "TASKS",
    "DEVICES",
    "PRECISIONS",
    "LOCAL_CONFIG_NAME",
    "TEXT_INPUT",
    "TensorSpec",
    "ModelSpec",
    "GenerateOptions",
    "StepSpec",
    "RepoSpec",
    "default_buckets",
    "normalise_buckets",
    "repo_paths",
]
