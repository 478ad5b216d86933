"""Typed specs passed between stages, and the single home of every name.

Data flows one way: model folder -> ModelSpec (with its task's Head) ->
RepoSpec -> repository -> server -> client. Every decision (names, dtypes,
bucket lengths, batching, instance kinds, runtime parameters) is made here,
in `source.py` or in a task module, once; templates only lay these objects
out, and the served modules read what they need from the configs.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Literal

from .errors import TokenizerRefused, TritonizeError
from .serving.batching import (
    ATTENTION_MASK,
    GATHER,
    INPUT_IDS,
    OFFSETS,
    QUEUE_BOUND,
    SPECIAL_TOKENS_MASK,
    TOKEN_COUNT,
    TRUNCATED,
)
from .serving.metrics import METRICS_MODEL

Device = Literal["cpu", "gpu"]
Precision = Literal["fp32", "fp16", "int8"]
InstanceKind = Literal["KIND_CPU", "KIND_GPU"]

DEVICES: tuple[str, ...] = ("cpu", "gpu")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")

# -- names: tensors ------------------------------------------------------------
TEXT_INPUT = "TEXT"  # the raw strings users send, BYTES [N, 1]
# What an ensemble whose first step tokenizes also returns per row (serving/batching.py says why).
TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT = TOKEN_COUNT, TRUNCATED
TOKEN_INPUTS: tuple[str, ...] = (INPUT_IDS, ATTENTION_MASK)  # tokenizer step -> model step (batching.py names them)
# What the tokenizer step can hand a post-processing step besides the model's inputs, and their dims.
TOKEN_EXTRAS: dict[str, tuple[int, ...]] = {OFFSETS: (-1, 2), SPECIAL_TOKENS_MASK: (-1,)}

# -- names: files and folders of a repository --------------------------------
CONFIG_FILE = "config.pbtxt"
FUSED_CONFIG_NAME = "fused"  # configs/fused.pbtxt: each model's config in the fused variant
# The name repositories written before took for the fused variant's configs (configs/local.pbtxt): still read
# and served, and kept for what is added to such a repository.
EARLIER_FUSED_CONFIG_NAME = "local"
CONFIGS_DIR = "configs"
# What a server serves of each model, by name: the production configs (each step's config.pbtxt, as NVIDIA's
# container loads them: the model step on the native onnxruntime backend, a Python tokenizer step, the ensemble)
# or the fused step (configs/fused.pbtxt: the tokenizer and the graph in one Python step).
PRODUCTION_VARIANT, FUSED_VARIANT = "production", "fused"
VARIANT_CONFIGS: dict[str, str | None] = {PRODUCTION_VARIANT: None, FUSED_VARIANT: FUSED_CONFIG_NAME}
DEFAULT_VARIANT = FUSED_VARIANT  # what the local server serves unless told
FIRST_VERSION = 1  # a new repository's version folders are 1/
MODEL_FILE = "model.onnx"
# The tokenizer inside the graph (`generate --tokenizer graph`, tritonize/graph_tokenizer.py): the model step's
# production graph, raw strings in, beside MODEL_FILE (which the fused step and verification run); and the
# onnxruntime-extensions operator library it needs, in the model step's folder (every version's), named in its
# config by the path from the server's working directory, where GRAPH_LIBRARY_ROOT is the repository (the local
# runtime links it there).
GRAPH_MODEL_FILE = "model_text.onnx"
GRAPH_LIBRARY_FILE = "libortextensions.so"
GRAPH_LIBRARY_ROOT = "models"
TOKENIZER_LAYOUTS: tuple[str, ...] = ("python", "graph")  # --tokenizer: a Python step, or inside the model's graph
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.txt"
MANIFEST_FILE = "tritonize.yaml"
# tritonize.yaml and verification.json of a repository of several models: each model's entry under this key
# (a repository of one model holds its entry alone, as before several models were served together).
MODELS_KEY = "models"
VERIFICATION_FILE = "verification.json"
# Per version of an embedder's model step, beside its verification report: the ranges int8/uint8 embeddings are
# quantized with (tasks/embedding/quantization.py).
QUANTIZATION_FILE = "quantization.json"
# Per version of a model step, beside its report: the manifest entry that version was generated from, so a rollout
# can tell a re-export of the same model (another precision or runtime) from a new model.
VERSION_MANIFEST_FILE = "version.yaml"
# At the top of a repository: the canary or shadow rollouts in progress (tritonize/rollout.py), read by the API.
ROLLOUT_FILE = "rollout.json"
CANDIDATE_SUFFIX = "_candidate"  # the ensemble pinned to a rollout's candidate version, beside the model's own
README_FILE = "README.md"
SERVED_ENTRY = "model.py"  # what the Python backend imports in a step's version folder
TOKENIZER_SUFFIX = "_tokenizer"
MODEL_SUFFIX = "_model"
POST_SUFFIX = "_post"
STATISTICS_SUFFIX = "_statistics"
STATISTICS_MODULE = "statistics_step"  # the production ensemble's step after a graph no Python follows
# One instance: its queue has no bound, so one instance does not stall (docs/benchmark.md), and it counts in
# microseconds.
STATISTICS_INSTANCES = 1

DEFAULT_BUCKET_LADDER = (16, 32, 64, 128, 256, 512)
TENSORRT_CACHE = "/tmp/tritonize_trt_cache"

# -- bounds --------------------------------------------------------------------
# Text bytes one request may carry: what protects the server (memory, and the tokenizer's time), as
# text-embeddings-inference's 2 MB body limit; a single text within it is served however long it is.
DEFAULT_MAX_REQUEST_BYTES = 2 * 1024 * 1024
# A full queue holds about this much work at the server's capacity ...
DEFAULT_QUEUE_BUDGET_MS = 1000
# ... and never fewer requests than this: a burst of 512 single requests is admitted, as
# text-embeddings-inference admits 512 concurrent requests by default.
MIN_QUEUE_SIZE = 512


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


ROW_OUTPUTS = (TensorSpec(TOKEN_COUNT_OUTPUT, "TYPE_INT32", (1,)), TensorSpec(TRUNCATED_OUTPUT, "TYPE_BOOL", (1,)))


@dataclass(frozen=True)
class Head:
    """The task-specific half of a ModelSpec; each task module defines one.

    A classifier's head has labels and no pooling, an embedder's has pooling
    and no labels: combinations that make no sense cannot be written down.
    """

    task: ClassVar[str]


@dataclass(frozen=True)
class ModelSpec:
    """What the source model is: decided once by `source.read_model`."""

    source: str  # the transformers folder the weights are read from
    head: Head
    max_length: int
    architecture: str
    model_type: str
    tokenizer_file: str  # absolute path to a tokenizer.json (transformers' own view of the tokenizer)
    pad_token_id: int = 0
    input_names: tuple[str, ...] = TOKEN_INPUTS  # ONNX / Triton inputs of the model step
    sentence_transformers_dir: str | None = None  # the folder with modules.json, when there is one
    trust_remote_code: bool = False

    @property
    def task(self) -> str:
        return self.head.task


# The model step's instances where --model-instances is not given: two in the production configs (see
# GenerateOptions.tokenizer_instances); one for the fused step, which holds its own bound and pipelines its
# batches (serving/fused_step.py), so one instance keeps every core busy and a second would only split its batches.
CONTAINER_MODEL_INSTANCES = 2
FUSED_STEP_INSTANCES = 1

# onnxruntime's threads per model-step instance on the native backend, CPU: one. Two instances with
# onnxruntime's default pools (a thread per core each) oversubscribe the cores the tokenizer stubs share. MiniLM,
# gRPC, two cores, paired runs in one bench (docs/benchmark.md): 16-token texts at concurrency 16 346 req/s
# against 260 with the default pools, mixed lengths 118 against 74. A GPU instance's threads only feed the GPU.
CPU_INTRA_OP_THREADS = 1

# How long the fused step's next run may wait for the clients the previous run answered (serving/fused_step.py);
# 0: it runs what waits at once. Against 0, at concurrency 4 on two cores: 128-token texts +12 to +21% in all five
# sets measured, 16-token +7 to +20% in four (-18% in one, where clients came back later than the window). A lone
# client never waits. `tritonize tune --grid gather_us=...` measures others on the serving machine.
DEFAULT_GATHER_US = 2000


@dataclass(frozen=True)
class DeviceDefaults:
    """What `generate` writes for a device where the user names no precision, fusions or batch size."""

    precision: str
    optimize: bool
    max_batch_size: int


# CPU: fp32, no fusions (5-10% slower per text on an AVX2 CPU at 4 rows or more, docs/benchmark.md), 64 rows.
CPU_DEFAULTS = DeviceDefaults(precision="fp32", optimize=False, max_batch_size=64)
# GPU, all-MiniLM-L6-v2 on an H100 with onnxruntime's CUDA provider, the model step alone, measured once
# (docs/benchmark.md#gpu): fp16 with onnxruntime's GPU fusions ran 48.5k rows/s at 64 x 128 tokens against
# 18.6k in fp32, cosine 0.999998 to sentence-transformers (fp16 stays held to min_cosine_fp16). 256 rows:
# rows/s still grew past 64 rows (16 tokens: 67.5k at 64, 171.8k at 128, 234k at 256; 128 tokens: 48.5k at
# 64, 75.9k at 256), and a full 256 x 128 batch takes 3.4 ms; beyond 256 nothing was measured. The queue
# bounds count requests and wait time, not rows, so they keep their meaning; the TensorRT profile and the GPU
# warm-up take a full batch of the longest bucket, so a model whose 256 rows do not fit fails at load.
GPU_DEFAULTS = DeviceDefaults(precision="fp16", optimize=True, max_batch_size=256)


def device_defaults(device: str, tensorrt: bool = False) -> DeviceDefaults:
    """The one home of the per-device defaults. Under TensorRT no fusions: onnxruntime's fused operators
    (com.microsoft Attention, SkipLayerNormalization, FastGelu) are not TensorRT's, so they would run on the
    CUDA provider and split the graph into TensorRT subgraphs whose inputs the one profile (TensorRTSpec) does
    not name; onnxruntime's TensorRT provider then applies no profile ("User needs to provide all the dynamic
    shape inputs with associated profiles") and builds engines during traffic, or refuses, as versions differ."""
    if device not in DEVICES:
        raise TritonizeError(f"device must be one of {', '.join(DEVICES)} (got {device!r})")
    if device == "cpu":
        return CPU_DEFAULTS
    return dataclasses.replace(GPU_DEFAULTS, optimize=False) if tensorrt else GPU_DEFAULTS


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
    # embedding: the Matryoshka sizes a request may cut vectors to (None: what the model card declares, if any)
    matryoshka_dims: list[int] | None = None
    # embedding: a file of texts, one per line, whose embeddings' per-dimension ranges int8/uint8 quantize with
    # (None: the verification corpus's)
    calibration: str | None = None
    # a file of texts (pairs: the two texts of a line split by a tab) whose answers are the output statistics'
    # baseline: their bounds and the shares drift compares with (None: the verification texts and the corpus)
    baseline: str | None = None
    aggregation: str | None = None  # token classification: none|simple|first|average|max (default simple)
    # Where the production configs tokenize: "python", a Python step before the model step; "graph", inside the
    # model step's ONNX graph (onnxruntime-extensions), where that is exact (graph_tokenizer.py), else "python".
    tokenizer: str = "python"
    output: str = "triton_repo"
    device: str = "cpu"
    # None: the device's (device_defaults), filled in at construction, so what is written back is what was resolved
    precision: str | None = None
    optimize: bool | None = None
    tensorrt: bool = False
    max_batch_size: int | None = None
    # 0: no wait at low load (each step would add the full delay); batches still form under load
    # because requests queue while an instance is busy. `tritonize tune` measures the alternatives.
    max_queue_delay_us: int = 0
    # Requests a step holds waiting; beyond it Triton answers UNAVAILABLE (gRPC) / 503 at once.
    # None: about queue_budget_ms of work at capacity_rps, never below MIN_QUEUE_SIZE (default_queue_size); 0: no bound.
    max_queue_size: int | None = None
    queue_budget_ms: int = DEFAULT_QUEUE_BUDGET_MS
    # Requests/s the server answers at full load, as `tritonize tune` measures it on the serving machine;
    # None: not measured (generation cannot know where the repository will be served), the floor holds.
    capacity_rps: float | None = None
    # Two instances of each batching step: Triton 2.51's dynamic batcher, once a queue is bounded, is not woken
    # when its only instance frees and waits up to 500 ms (docs/benchmark.md); a second instance is mostly free
    # then. The model step's: None takes CONTAINER_MODEL_INSTANCES and FUSED_STEP_INSTANCES.
    tokenizer_instances: int = 2
    model_instances: int | None = None
    gather_us: int = DEFAULT_GATHER_US  # the fused step only: the production configs batch with Triton's own batcher
    buckets: list[int] | None = None
    # Bytes of text one request may carry (its texts summed), checked by the first step before it decodes
    # anything; 0: no bound. Within it, every text is read as the model reads it.
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    # A text longer than the max length: its first tokens are served (as sentence-transformers and the
    # pipelines truncate), or with False the request is refused (text-embeddings-inference's truncate=false).
    truncate: bool = True
    opset: int = 17
    trust_remote_code: bool = False
    force: bool = False
    # Add this model to the repository at `output`, beside the models already there (under its own name),
    # instead of replacing the repository.
    add: bool = False
    skip_verify: bool = False
    atol: float = 1e-4
    min_cosine_fp16: float = 0.999
    # int8 (onnxruntime dynamic quantization, CPU): per-text cosine against the fp32 graph, and the task's
    # own figure on the shipped corpus (embeddings: top-10 retrieval overlap; classifiers: argmax agreement).
    min_cosine_int8: float = 0.99
    # The version folder this model becomes in every step. None: FIRST_VERSION for a new repository; a
    # higher number joins an existing repository beside the version it serves (`deploy.py local switch`).
    version: int | None = None

    def __post_init__(self) -> None:
        """Fill what the user left to the device; a value given (a flag, a YAML key, a tritonize.yaml written
        back) wins. `dataclasses.replace` keeps the values resolved for the first device: build anew instead."""
        defaults = device_defaults(self.device, bool(self.tensorrt))
        for key in ("precision", "optimize", "max_batch_size"):
            if getattr(self, key) is None:
                setattr(self, key, getattr(defaults, key))

    def check(self) -> None:
        """Refuse, in one line, values no repository can be planned with (the task's own refusals are its own)."""
        for label, value in (("--max-batch-size", self.max_batch_size), ("--tokenizer-instances", self.tokenizer_instances),
                             ("--model-instances", self.model_instances)):
            if value is not None and value < 1:
                raise TritonizeError(f"{label} must be at least 1 (got {value})")
        for label, value in (("--max-queue-delay-us", self.max_queue_delay_us), ("--max-queue-size", self.max_queue_size),
                             ("--max-request-bytes", self.max_request_bytes), ("--gather-us", self.gather_us)):
            if value is not None and value < 0:
                raise TritonizeError(f"{label} must be 0 or more (got {value})")
        for label, value in (("--queue-budget-ms", self.queue_budget_ms), ("--capacity-rps", self.capacity_rps)):
            if value is not None and value <= 0:
                raise TritonizeError(f"{label} must be more than 0 (got {value})")
        if self.version is not None and self.version < 1:
            raise TritonizeError(f"--version must be at least 1 (got {self.version})")
        if self.tokenizer not in TOKENIZER_LAYOUTS:
            raise TritonizeError(f"--tokenizer must be one of {', '.join(TOKENIZER_LAYOUTS)} (got {self.tokenizer!r})")
        if self.tensorrt and self.device != "gpu":
            raise TritonizeError("--tensorrt needs --device gpu", hint="TensorRT runs on NVIDIA GPUs only")
        if self.precision == "int8" and self.device != "cpu":
            raise TritonizeError("--precision int8 is for CPU deployments (onnxruntime's dynamic quantization)",
                                 hint="use --device cpu, or --precision fp16 on a GPU")

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Overrides:
    """What `reconfigure` (and so `tritonize tune`) may change without re-exporting: batching, placement,
    the bounds on requests and queues, and truncation."""

    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    max_queue_size: int | None = None
    queue_budget_ms: int | None = None
    capacity_rps: float | None = None
    tokenizer_instances: int | None = None
    model_instances: int | None = None
    gather_us: int | None = None
    buckets: list[int] | None = None
    max_request_bytes: int | None = None
    truncate: bool | None = None

    @classmethod
    def of(cls, changes: dict) -> Overrides:
        """From a plain mapping (a tune grid point); an unknown key is an error, not ignored."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TritonizeError(f"unknown option(s): {', '.join(unknown)}", hint=f"reconfigure changes {', '.join(sorted(known))}")
        return cls(**changes)

    def apply(self, options: GenerateOptions) -> GenerateOptions:
        changes = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return dataclasses.replace(options, **changes)


@dataclass(frozen=True)
class StepSpec:
    """One Triton model of the repository: batching and placement."""

    name: str
    module: str  # the served module (tritonize/serving/<module>.py) its Python runtime runs as model.py
    max_batch_size: int
    max_queue_delay_us: int
    instance_count: int
    kind: InstanceKind
    max_queue_size: int = 0  # 0: no bound
    # With a bound, a request waiting longer than this is refused (Triton's default_timeout_microseconds): the
    # requests a bound admits wait about the budget whatever their length; the size alone let 512 queued
    # 128-token requests wait 12.9 s (p50) at 4 x capacity on the production configs, 4.2 s with it (of which a
    # run of 64 such rows on one onnxruntime thread takes about 2 s; docs/reliability.md). 0: no time bound.
    max_queue_wait_us: int = 0


Shape = tuple[int, int]  # (rows, tokens): every input of the model step is [batch, sequence]


@dataclass(frozen=True)
class TensorRTSpec:
    """The TensorRT accelerator of the container's onnxruntime backend, with one optimization profile.

    With every input's min/opt/max shapes given, onnxruntime's TensorRT provider builds (or loads from the
    cache) one engine for every shape the step may receive when the model loads; without them it builds for
    the first shapes it sees and rebuilds when larger ones come, during traffic.
    """

    precision_mode: Literal["FP32", "FP16"]
    inputs: tuple[str, ...]  # the model step's inputs, token_type_ids included where the graph takes it
    min_shape: Shape
    opt_shape: Shape
    max_shape: Shape
    max_workspace_size_bytes: int = 1 << 30
    engine_cache_path: str = TENSORRT_CACHE

    @classmethod
    def of(cls, precision: str, inputs: tuple[str, ...], buckets: tuple[int, ...], max_batch_size: int) -> TensorRTSpec:
        """The profile of a step that takes up to `max_batch_size` rows padded to `buckets`.

        min 1x1: the step's dims are [-1, -1] and a shape outside the profile is refused, not rebuilt, so
        a client calling the step directly with unpadded rows is still served. max: a full batch of the
        longest bucket (the max length). opt, the shape TensorRT tunes its kernels for: a full batch, which
        is where the GPU's time goes under load, of the middle bucket, within a doubling or two of the
        other buckets. Not measured (no GPU here); `--buckets` and `--max-batch-size` move all three.
        """
        return cls(
            precision_mode="FP16" if precision == "fp16" else "FP32",
            inputs=tuple(inputs),
            min_shape=(1, 1),
            opt_shape=(max_batch_size, buckets[(len(buckets) - 1) // 2]),
            max_shape=(max_batch_size, buckets[-1]),
        )

    def profile_shapes(self, shape: Shape) -> str:
        """onnxruntime's trt_profile_*_shapes value, which the backend passes on as written: "name:BxT,..."."""
        return ",".join(f"{name}:{shape[0]}x{shape[1]}" for name in self.inputs)

    @property
    def layer_norm_fp32_fallback(self) -> bool:
        """In FP16, onnxruntime's TensorRT provider keeps each layer norm's Pow and ReduceMean in fp32, where
        fp16 overflows on large activations. Triton's onnxruntime backend r24.10 hands the key on as written
        (src/onnxruntime.cc, lines 560-567 at commit 17e5cb23: `param_key == "trt_layer_norm_fp32_fallback"`,
        parsed by ParseBoolValue, passed as `trt_layer_norm_fp32_fallback`); an unknown key fails the load."""
        return self.precision_mode == "FP16"

    @property
    def parameters(self) -> dict[str, str]:
        return {
            "precision_mode": self.precision_mode,
            "max_workspace_size_bytes": str(self.max_workspace_size_bytes),
            "trt_engine_cache_enable": "1",
            "trt_engine_cache_path": self.engine_cache_path,
            "trt_profile_min_shapes": self.profile_shapes(self.min_shape),
            "trt_profile_opt_shapes": self.profile_shapes(self.opt_shape),
            "trt_profile_max_shapes": self.profile_shapes(self.max_shape),
        } | ({"trt_layer_norm_fp32_fallback": "1"} if self.layer_norm_fp32_fallback else {})


@dataclass(frozen=True)
class WarmupSample:
    """One request Triton runs through each instance of the model step before the server reports it ready.

    Every input is zeros of `length` tokens: id 0 is in every vocabulary, while Triton's random_data fills
    int64 tensors with random bytes, ids no embedding table holds (the load would fail).
    """

    batch_size: int
    length: int

    @property
    def name(self) -> str:
        return f"bucket_{self.length}" + (f"_batch_{self.batch_size}" if self.batch_size > 1 else "")


@dataclass(frozen=True)
class FusedRuntimeSpec:
    """How the fused variant's Python-backend model step runs the graph (see serving/onnx_model.py)."""

    intra_op_threads: int = 0  # 0: every core, for a lone text
    allow_spinning: bool = True  # within a run only (force_spinning_stop)
    data_parallel: bool = True  # batches as one single-threaded shard per core (large ones: onnx_model.py)
    ragged: bool = True  # requests padded to different buckets may share a batch
    gather_us: int = DEFAULT_GATHER_US  # the fused step: how long a run may wait for the clients the last one answered
    kind: InstanceKind = "KIND_CPU"


@dataclass(frozen=True)
class EnsembleStep:
    """One step of the ensemble: which model, and how its tensors connect."""

    model_name: str
    input_map: dict[str, str]  # the step's input -> the ensemble tensor
    output_map: dict[str, str]  # the step's output -> the ensemble tensor


def _same(tensors: tuple[TensorSpec, ...]) -> dict[str, str]:
    """An ensemble step's map of tensors it passes under their own names."""
    return {t.name: t.name for t in tensors}


class Pipeline(abc.ABC):
    """The shape of a task's ensemble, which the task declares as a value (`Task.pipeline`): which served module
    each step runs, what each step takes and returns, the ensemble's steps, and the fused variant's.

    `RepoSpec` holds it and asks it; templates lay out what it answers. A new shape is a new subclass here, and
    nothing else branches on which shape a task has.
    """

    first_module: ClassVar[str] = "tokenizer"  # the first step's served module (tritonize/serving/<name>.py)
    post_module: ClassVar[str | None] = None  # the post step's, where one follows the model step
    # Whether the first step calls the model step itself and answers (business logic scripting).
    orchestrates: ClassVar[bool] = False
    # Whether no served step follows the graph in the production ensemble, so that a statistics step must
    # count what it answers.
    counts_after_graph: ClassVar[bool] = False

    @property
    def fuses(self) -> bool:
        """Whether the fused variant runs the first step and the model step as one (serving/fused_step.py); a first
        step that calls the model step itself keeps it a step of its own."""
        return not self.orchestrates

    @property
    def model_module(self) -> str:
        """The served module in the model step's version folder: what the fused variant's config runs."""
        return "fused_step" if self.fuses else "onnx_model"

    @property
    @abc.abstractmethod
    def row_outputs(self) -> tuple[TensorSpec, ...]:
        """What the ensemble returns per row besides the task's outputs."""

    @abc.abstractmethod
    def first_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """What the first step returns."""

    def post_inputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """What the post step takes (nothing without one)."""
        return ()

    @abc.abstractmethod
    def ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        """The production ensemble's steps."""

    def fused_ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        """The fused variant's ensemble steps."""
        return self.ensemble_steps(repo)

    def fused_model_inputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The fused variant's model step's inputs."""
        return repo.token_inputs

    def fused_model_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The fused variant's model step's outputs."""
        return repo.graph_outputs

    def watched_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The graph's outputs a statistics step counts in the production ensemble (none: a served step that
        follows or drives the graph counts them)."""
        return ()

    def tokenizer_folders(self, repo: RepoSpec) -> tuple[StepSpec, ...]:
        """The steps whose version folder holds tokenizer.json: each that tokenizes or decodes words."""
        return tuple(s for s in (repo.first_step, repo.model_step if self.fuses else None, repo.post_step) if s)

    def model_inputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The production model step's inputs."""
        return repo.token_inputs

    def model_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The production model step's outputs."""
        return repo.graph_outputs

    model_file: ClassVar[str] = MODEL_FILE  # the production model step's graph
    model_libraries: ClassVar[tuple[str, ...]] = ()  # operator libraries it loads, in its folder

    def in_graph(self) -> Pipeline:
        """This shape with the tokenizer inside the model step's graph; refused in one line where it has none."""
        raise TokenizerRefused(f"the graph tokenizer serves a tokenizer step followed by the model alone; "
                               f"this task's ensemble is {type(self).__name__}")


@dataclass(frozen=True)
class TokenizeModel(Pipeline):
    """tokenize -> model: the first step tokenizes, and the graph's outputs are the answer. The fused variant runs
    the two as one step, raw strings in."""

    counts_after_graph: ClassVar[bool] = True

    @property
    def row_outputs(self) -> tuple[TensorSpec, ...]:
        """Token counts and the truncated flag: the first step tokenizes, so it knows them."""
        return ROW_OUTPUTS

    def extra_token_outputs(self) -> tuple[TensorSpec, ...]:
        """Tokenizer outputs that only a post step reads."""
        return ()

    def first_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        return repo.token_inputs + self.extra_token_outputs() + self.row_outputs

    def watched_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The graph's outputs a statistics step counts in the production ensemble: those the task's output
        statistics read, where no served step follows the graph (serving/statistics_step.py)."""
        reads = {tensor for _, tensor in repo.statistics}
        return tuple(t for t in repo.graph_outputs if t.name in reads) if repo.statistics_step else ()

    def post_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        """The served steps after the graph, in both variants."""
        return ()

    def ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        watched = [t.name for t in self.watched_outputs(repo)]
        graph = {t.name: graph_tensor(t.name) if t.name in watched else t.name for t in repo.graph_outputs}
        steps = (
            EnsembleStep(repo.first_step.name, _same(repo.text_inputs), _same(self.first_outputs(repo))),
            EnsembleStep(repo.model_name, _same(repo.token_inputs), graph),
        )
        if watched:  # the statistics step hands the graph's outputs on under their own names
            counting = repo.statistics_step.name  # type: ignore[union-attr]
            steps += (EnsembleStep(counting, {n: graph[n] for n in watched}, {n: n for n in watched}),)
        return steps + self.post_steps(repo)

    def fused_ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        """The first step and the model step as one (which counts what the graph answers itself), then the
        served steps after them."""
        fused = EnsembleStep(repo.model_name, _same(repo.text_inputs), _same(self.fused_model_outputs(repo)))
        return (fused,) + self.post_steps(repo)

    def fused_model_inputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The texts: the fused step tokenizes them itself."""
        return repo.text_inputs

    def fused_model_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The graph's outputs, and the first step's tensors that the ensemble passes on."""
        onward = {t.name for t in repo.ensemble_outputs + self.post_inputs(repo)}
        return repo.graph_outputs + tuple(t for t in self.first_outputs(repo) if t.name in onward)

    def in_graph(self) -> Pipeline:
        return TokenizeInGraph()


@dataclass(frozen=True)
class TokenizeInGraph(TokenizeModel):
    """tokenize -> model as one graph: the production model step takes the raw strings and tokenizes inside its
    ONNX graph (graph_tokenizer.py), returning the row outputs besides the graph's; the ensemble is that step.
    The fused variant keeps the fused Python step, on MODEL_FILE."""

    model_file: ClassVar[str] = GRAPH_MODEL_FILE
    model_libraries: ClassVar[tuple[str, ...]] = (GRAPH_LIBRARY_FILE,)
    # No Python on its production path, so no step counts the output statistics there (the fused variant does).
    counts_after_graph: ClassVar[bool] = False

    def ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        return (EnsembleStep(repo.model_name, _same(repo.text_inputs), _same(self.model_outputs(repo))),)

    def fused_ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        return TokenizeModel().fused_ensemble_steps(repo)

    def model_inputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        return repo.text_inputs

    def model_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        return repo.graph_outputs + self.row_outputs

    def in_graph(self) -> Pipeline:
        return self


@dataclass(frozen=True)
class TokenizeModelPost(TokenizeModel):
    """tokenize -> model -> post: a served step turns the graph's outputs into the answer, reading besides them
    the tokenizer outputs it names and (unless it reads the graph's outputs alone) the texts and their encoding."""

    module: str  # the post step's served module
    token_extras: tuple[str, ...] = ()  # tokenizer outputs only the post step reads (TOKEN_EXTRAS)
    reads_text: bool = True  # the post step takes the texts and their encoding besides the graph's outputs

    counts_after_graph: ClassVar[bool] = False  # the post step counts what it answers

    @property
    def post_module(self) -> str:  # type: ignore[override]
        return self.module

    def extra_token_outputs(self) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(n, "TYPE_INT64", TOKEN_EXTRAS[n]) for n in self.token_extras)

    def in_graph(self) -> Pipeline:
        return Pipeline.in_graph(self)  # the post step reads the tokenizer's encoding

    def post_inputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        """The texts, their encoding (real lengths, offsets, special tokens) and the model's outputs; the model's
        outputs alone where the post step reads nothing else."""
        if not self.reads_text:
            return repo.graph_outputs
        ids_and_mask = tuple(t for t in repo.token_inputs if t.name in TOKEN_INPUTS)
        return repo.text_inputs + ids_and_mask + self.extra_token_outputs() + repo.graph_outputs

    def post_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        return (EnsembleStep(repo.post_step.name, _same(self.post_inputs(repo)), _same(repo.outputs)),)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Orchestrated(Pipeline):
    """An orchestrating first step: it calls the model step itself (business logic scripting: one text can
    become several model rows) and answers, so the ensemble is that one step, in both variants."""

    module: str  # the first step's served module

    orchestrates = True

    @property
    def first_module(self) -> str:  # type: ignore[override]
        return self.module

    @property
    def row_outputs(self) -> tuple[TensorSpec, ...]:
        """None: the first step answers alone."""
        return ()

    def first_outputs(self, repo: RepoSpec) -> tuple[TensorSpec, ...]:
        return repo.outputs

    def ensemble_steps(self, repo: RepoSpec) -> tuple[EnsembleStep, ...]:
        return (EnsembleStep(repo.first_step.name, _same(repo.text_inputs), _same(repo.outputs)),)


@dataclass(frozen=True)
class RepoSpec:
    """What the repository will be: names, tensors, steps and runtime choices."""

    name: str  # the ensemble, which users call
    model: ModelSpec
    description: str  # the head in a few words (the task says)
    text_inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]  # what the ensemble returns
    graph_outputs: tuple[TensorSpec, ...]  # what the model step returns (the outputs, unless a step follows it)
    labels: tuple[str, ...]  # written to LABELS_FILE when any output names it
    truncation: str | None  # the tokenizer's strategy (pairs: "only_second"); None: the tokenizer's default
    pipeline: Pipeline  # the ensemble's shape, as the task declares it
    first_step: StepSpec  # the tokenizer step, or the step that orchestrates the model step
    model_step: StepSpec
    buckets: tuple[int, ...]
    device: Device = "cpu"
    precision: Precision = "fp32"
    tensorrt: TensorRTSpec | None = None
    fused_runtime: FusedRuntimeSpec = field(default_factory=FusedRuntimeSpec)
    max_batch_size: int = 64
    post_step: StepSpec | None = None  # served post-processing after the model (token classification)
    post_parameters: dict[str, str] = field(default_factory=dict)
    # What the served steps count of the answers: (statistic, the tensor it reads), as the task declares them
    # (serving/statistics.py); the statistics step counts the graph's where no served step follows it.
    statistics: tuple[tuple[str, str], ...] = ()
    statistics_step: StepSpec | None = None
    first_parameters: dict[str, str] = field(default_factory=dict)  # the task's, for the first step (whom to call)
    ensemble_parameters: dict[str, str] = field(default_factory=dict)  # the task's, for clients (a similarity)
    max_request_bytes: int = 0  # text bytes per request, checked by the first step before it decodes; 0: no bound
    truncate: bool = True  # False: a text over the max length is refused, not truncated
    version: int = FIRST_VERSION  # the version folder of every step; the ensemble pins its steps to it
    fused_model_instances: int = FUSED_STEP_INSTANCES  # the fused step's instances (--model-instances)
    # What each model's fused-variant config is named (configs/<name>.pbtxt): FUSED_CONFIG_NAME, or the name the
    # repository this model joins was written with.
    fused_config_name: str = FUSED_CONFIG_NAME

    @property
    def pad_token_id(self) -> int:
        return self.model.pad_token_id

    @property
    def model_name(self) -> str:
        return self.model_step.name

    @property
    def token_inputs(self) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(n, "TYPE_INT64", (-1,)) for n in self.model.input_names)

    @property
    def ensemble_outputs(self) -> tuple[TensorSpec, ...]:
        """What users get: the task's outputs, then the pipeline's row outputs."""
        return self.outputs + self.pipeline.row_outputs

    @property
    def first_outputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.first_outputs(self)

    @property
    def post_inputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.post_inputs(self)

    @property
    def steps(self) -> tuple[StepSpec, ...]:
        return (self.first_step, self.model_step) + tuple(s for s in (self.post_step, self.statistics_step) if s)

    @property
    def watched_outputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.watched_outputs(self)

    @property
    def model_inputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.model_inputs(self)

    @property
    def model_outputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.model_outputs(self)

    @property
    def model_libraries(self) -> tuple[str, ...]:
        """The operator libraries the production model step loads, by their path from the server's working
        directory (GRAPH_LIBRARY_ROOT: the repository)."""
        return tuple(f"{GRAPH_LIBRARY_ROOT}/{self.model_name}/{f}" for f in self.pipeline.model_libraries)

    @property
    def model_parameters(self) -> dict[str, str]:
        """The native onnxruntime backend's settings of the model step (its config.pbtxt)."""
        return {"intra_op_thread_count": str(CPU_INTRA_OP_THREADS)} if self.device == "cpu" else {}

    @property
    def model_warmup(self) -> tuple[WarmupSample, ...]:
        """What each instance of the model step runs before the server reports ready (its config.pbtxt).

        One row of every bucket, on CPU and GPU: a graph that cannot run fails the load instead of the
        first requests, and each shape's first run (TensorRT's execution context, onnxruntime's allocations)
        happens before traffic. On a GPU also a full batch of the longest bucket, the step's peak memory:
        a model that does not fit fails at load, not on the first burst. Not on CPU, where that batch costs
        seconds of start: MiniLM, production variant, two cores, five starts each, ready in 1.8-3.7 s
        (median 2.4) with the five one-row samples, 2.4-3.7 s (median 2.6) without, 11.4-16.8 s with the
        64x256 batch as well.
        """
        if self.model_inputs == self.text_inputs:  # raw strings: one row of one empty text
            return (WarmupSample(1, 1),)
        samples = tuple(WarmupSample(1, b) for b in self.buckets)
        if self.device == "gpu" and self.model_step.max_batch_size > 1:
            samples += (WarmupSample(self.model_step.max_batch_size, self.buckets[-1]),)
        return samples

    @property
    def first_step_parameters(self) -> dict[str, str]:
        params = {
            "tokenizer_file": TOKENIZER_FILE,
            "max_length": str(self.model.max_length),
            "buckets": ",".join(map(str, self.buckets)),
            "pad_id": str(self.pad_token_id),
            "max_request_bytes": str(self.max_request_bytes),
            "truncate": str(int(self.truncate)),
        }
        return params | ({"truncation": self.truncation} if self.truncation else {}) | self.first_parameters

    @property
    def fused_model_step(self) -> StepSpec:
        """The fused variant's model step. As the fused step it holds its queue bound itself
        (serving/fused_step.py, a parameter) and its config none: Triton's bound turns off the batcher's
        prefetching, and with it the wake-up that Triton 2.51 loses."""
        if not self.pipeline.fuses:
            return self.model_step
        return dataclasses.replace(self.model_step, instance_count=self.fused_model_instances, max_queue_size=0)

    @property
    def fused_model_inputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.fused_model_inputs(self)

    @property
    def fused_model_outputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.fused_model_outputs(self)

    @property
    def fused_model_parameters(self) -> dict[str, str]:
        runner = {
            "onnx_file": MODEL_FILE,
            "intra_op_threads": str(self.fused_runtime.intra_op_threads),
            "allow_spinning": str(int(self.fused_runtime.allow_spinning)),
            "data_parallel": str(int(self.fused_runtime.data_parallel)),
            "buckets": ",".join(map(str, self.buckets)),
            "pad_id": str(self.pad_token_id),
        }
        if not self.pipeline.fuses:
            return runner
        return runner | self.first_step_parameters | {METRICS_MODEL: self.first_step.name,
                                                      QUEUE_BOUND: str(self.model_step.max_queue_size),
                                                      GATHER: str(self.fused_runtime.gather_us)}

    @property
    def tokenizer_folders(self) -> tuple[StepSpec, ...]:
        return self.pipeline.tokenizer_folders(self)

    @property
    def ensemble_steps(self) -> tuple[EnsembleStep, ...]:
        return self.pipeline.ensemble_steps(self)

    @property
    def fused_ensemble_steps(self) -> tuple[EnsembleStep, ...]:
        return self.pipeline.fused_ensemble_steps(self)


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


def default_queue_size(budget_ms: int, capacity_rps: float | None) -> int:
    """What a step drains within the latency budget at the server's capacity, never below MIN_QUEUE_SIZE.

    A queue of one batch turned away bursts the server would answer within a second; a queue much larger
    than the budget lets accepted requests wait without bound under overload.
    """
    if not capacity_rps:
        return MIN_QUEUE_SIZE
    return max(MIN_QUEUE_SIZE, math.ceil(budget_ms / 1000 * capacity_rps))


def step_names(name: str) -> dict[str, str]:
    """The Triton models of a repository named `name` (the post and statistics steps only where it has them)."""
    return {"ensemble": name, "tokenizer": f"{name}{TOKENIZER_SUFFIX}", "model": f"{name}{MODEL_SUFFIX}",
            "post": f"{name}{POST_SUFFIX}", "statistics": f"{name}{STATISTICS_SUFFIX}"}


def graph_tensor(name: str) -> str:
    """The ensemble's name for a graph output that a statistics step hands on under the output's own name."""
    return f"{name}__graph"


def repo_paths(output: str | Path, name: str) -> dict[str, Path]:
    """Where each model lives inside a repository (one place for the layout)."""
    root = Path(output)
    return {"root": root, **{step: root / model for step, model in step_names(name).items()}}
