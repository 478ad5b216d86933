"""The user-facing options of `tritonize generate` (`GenerateOptions`), what `reconfigure` may change
(`Overrides`), and the per-device defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import tasks
from ..errors import TritonizeError
from .buckets import DEFAULT_MAX_REQUEST_BYTES, DEFAULT_QUEUE_BUDGET_MS
from .names import TOKENIZER_LAYOUTS
from .repo import DEFAULT_GATHER_US


DEVICES: tuple[str, ...] = ("cpu", "gpu")
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")


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


def _with_task_options(cls: type) -> type:
    """The dataclass of the common fields with every task's own options (`tasks.OPTIONS`, None unless given)
    among them, each after the field it names; `task_options` lists them."""
    fields: dict[str, str] = {}
    placed = set()
    for name, annotation in cls.__annotations__.items():
        fields[name] = annotation
        for option in tasks.OPTIONS:
            if option.after == name:
                fields[option.field] = option.annotation
                setattr(cls, option.field, None)
                placed.add(option)
    missing = [o.field for o in tasks.OPTIONS if o not in placed]
    if missing:
        raise TypeError(f"task option(s) {', '.join(missing)} follow no field of {cls.__name__}")
    cls.__annotations__ = fields
    cls.task_options = tasks.OPTIONS  # type: ignore[attr-defined]
    return dataclass(cls)


@_with_task_options
class GenerateOptions:
    """Every user-facing option of `tritonize generate` (CLI flags and YAML keys): the common fields here, and
    each task's own (`Task.own_options`), gathered from the task registry.

    Written back into the repository as `tritonize.yaml`, so a repository can
    be regenerated and diffed.
    """

    model: str = ""
    task: str | None = None
    name: str | None = None
    max_length: int | None = None
    # (each task's own options follow the field they name: `_with_task_options`)
    # a file of texts (pairs: the two texts of a line split by a tab) whose answers are the output statistics'
    # baseline: their bounds and the shares drift compares with (None: the verification texts and the corpus)
    baseline: str | None = None
    # Where the repository tokenizes: "graph", in ONNX graphs onnxruntime serves (onnxruntime-extensions' operators;
    # no Python per request), where that is exact (graph_tokenizer/), else "python" with the reason in one line;
    # "python", a Python step before the model step.
    tokenizer: str = "graph"
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
    # The HTTP API's processes (`tritonize api --workers`), as `tritonize tune --api-workers` measured them on the
    # serving machine; None: not measured (one). A flag or $TRITONIZE_API_WORKERS still wins.
    api_workers: int | None = None
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
    # On a CPU, behind the Python tokenizer step: the production model step's graph runs its batch's rows by
    # bucket, in runs of at most RUN_TOKENS tokens (RUNS_MODEL_FILE; planning.model_runs says where it applies).
    model_runs: bool = True
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
                             ("--model-instances", self.model_instances), ("--api-workers", self.api_workers)):
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
    the bounds on requests and queues, truncation, and the API's processes."""

    max_batch_size: int | None = None
    max_queue_delay_us: int | None = None
    max_queue_size: int | None = None
    queue_budget_ms: int | None = None
    capacity_rps: float | None = None
    api_workers: int | None = None
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
