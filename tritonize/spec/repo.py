"""What one model's part of a repository will be (`RepoSpec`): names, tensors, steps and runtime parameters,
and the runtime specs it holds (TensorRT, warm-up, the fused step's runner)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from ..serving.admission import ADMIT_BEHIND, ADMIT_BOUND, ADMIT_BUDGET_US
from ..serving.batching import GATHER, QUEUE_BOUND
from ..serving.metrics import METRICS_MODEL
from .model import ModelSpec, TensorSpec
from .names import (
    FIRST,
    FIRST_VERSION,
    FUSED_CONFIG_NAME,
    MODEL,
    MODEL_FILE,
    POST,
    RUNS_MODEL_FILE,
    STATISTICS,
    TENSORRT_CACHE,
    TOKENIZER_FILE,
    StepRole,
)
from .pipeline import EnsembleStep, InstanceKind, Pipeline, StepSpec, cpu_model_step


Device = Literal["cpu", "gpu"]
Precision = Literal["fp32", "fp16", "int8"]

# batches (serving/fused_step.py), so one instance keeps every core busy and a second would only split its batches.
CONTAINER_MODEL_INSTANCES = 2
FUSED_STEP_INSTANCES = 1

# onnxruntime's threads per instance of a step on the native backend beside Python steps, CPU: one. Two instances
# with onnxruntime's default pools (a thread per core each) oversubscribe the cores the tokenizer stubs share.
# MiniLM, gRPC, two cores, paired runs in one bench (docs/benchmark.md): 16-token texts at concurrency 16 346 req/s
# against 260 with the default pools, mixed lengths 118 against 74. The model step's are its pipeline's
# (`Pipeline.cpu_model_step`); a GPU instance's threads only feed the GPU.
CPU_INTRA_OP_THREADS = 1

# How long the fused step's next run may wait for the clients the previous run answered (serving/fused_step.py);
# 0: it runs what waits at once. Against 0, at concurrency 4 on two cores: 128-token texts +12 to +21% in all five
# sets measured, 16-token +7 to +20% in four (-18% in one, where clients came back later than the window). A lone
# client never waits. `tritonize tune --grid gather_us=...` measures others on the serving machine.
DEFAULT_GATHER_US = 2000


Shape = tuple[int, int]  # (rows, tokens): every input of the model step is [batch, sequence]
# A task's own warm-up samples beyond the token buckets: (name, (input, dims) of each input that is not tokens) each
WarmupInputs = tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]


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
    # Dims of inputs that are not tokens, by name (the task's `warmup_inputs`: an image-and-text graph's pixels of
    # an image, its vision branch), and what the sample is called then.
    dims: tuple[tuple[str, tuple[int, ...]], ...] = ()
    label: str = ""

    def dims_of(self, tensor: TensorSpec) -> str:
        """The sample's dims of one input: its own where it has them, `length` tokens for a token tensor, else the
        declared dims with each variable one at 1 (an image-and-text graph's pixels of a text row: its text
        branch)."""
        own = dict(self.dims).get(tensor.name)
        if own is not None:
            return ", ".join(map(str, own))
        if tensor.dims == (-1,):
            return str(self.length)
        return ", ".join(str(d if d > 0 else 1) for d in tensor.dims)

    @property
    def name(self) -> str:
        return self.label or (f"bucket_{self.length}" + (f"_batch_{self.batch_size}" if self.batch_size > 1 else ""))


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
    # One step of each role the pipeline declares and the model has, in the ensemble's order (`step(role)`).
    steps: tuple[StepSpec, ...]
    buckets: tuple[int, ...]
    device: Device = "cpu"
    precision: Precision = "fp32"
    tensorrt: TensorRTSpec | None = None
    fused_runtime: FusedRuntimeSpec = field(default_factory=FusedRuntimeSpec)
    max_batch_size: int = 64
    post_parameters: dict[str, str] = field(default_factory=dict)
    # What the served steps count of the answers: (statistic, the tensor it reads), as the task declares them
    # (its statistics_module); the statistics step counts the graph's where no served step follows it.
    statistics: tuple[tuple[str, str], ...] = ()
    # The task's served module that declares its statistics (`STATISTICS`): copied beside serving/statistics.py
    statistics_module: str | None = None
    first_parameters: dict[str, str] = field(default_factory=dict)  # the task's, for the first step (whom to call)
    ensemble_parameters: dict[str, str] = field(default_factory=dict)  # the task's, for clients (a similarity)
    warmup_inputs: WarmupInputs = ()  # the task's own warm-up samples beyond the token buckets
    max_request_bytes: int = 0  # text bytes per request, checked by the first step before it decodes; 0: no bound
    truncate: bool = True  # False: a text over the max length is refused, not truncated
    version: int = FIRST_VERSION  # the version folder of every step; the ensemble pins its steps to it
    fused_model_instances: int = FUSED_STEP_INSTANCES  # the fused step's instances (--model-instances)
    # What each model's fused-variant config is named (configs/<name>.pbtxt): FUSED_CONFIG_NAME, or the name the
    # repository this model joins was written with.
    fused_config_name: str = FUSED_CONFIG_NAME
    # Whether the production model step runs its batch's rows in runs (RUNS_MODEL_FILE, beside MODEL_FILE): planning
    # decides (`planning.model_runs`), generation builds the graph and checks its answers against MODEL_FILE's.
    model_runs: bool = False

    @property
    def model_file(self) -> str:
        """The production model step's graph file."""
        return RUNS_MODEL_FILE if self.model_runs else self.pipeline.model_file

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

    def step(self, role: StepRole) -> StepSpec | None:
        """The model's step of `role`, where it has one."""
        return next((s for s in self.steps if s.role == role), None)

    def without(self, role: StepRole) -> RepoSpec:
        """The same repository without its step of `role` (one written before it had such a step)."""
        return dataclasses.replace(self, steps=tuple(s for s in self.steps if s.role != role))

    @property
    def first_step(self) -> StepSpec:
        """The step that reads the texts: the tokenizer step, or the step that orchestrates the model step."""
        return self.step(FIRST)  # type: ignore[return-value]

    @property
    def model_step(self) -> StepSpec:
        return self.step(MODEL)  # type: ignore[return-value]

    @property
    def post_step(self) -> StepSpec | None:
        """Served post-processing after the model (token classification, sparse embedding)."""
        return self.step(POST)

    @property
    def statistics_step(self) -> StepSpec | None:
        return self.step(STATISTICS)

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
        """The operator libraries the production model step loads, by bare name (runtime/operator_library.py:
        every server tritonize starts finds them)."""
        return self.pipeline.model_libraries

    @property
    def first_libraries(self) -> tuple[str, ...]:
        """The operator libraries a first step served by onnxruntime loads, as `model_libraries`."""
        return self.pipeline.first_libraries

    @property
    def first_graph_parameters(self) -> dict[str, str]:
        """The native onnxruntime backend's settings of a first step it serves (on the CPU, beside the others), and
        the tokenizer's, which the in-process chain reads as it reads the Python step's (the backend ignores them)."""
        return {"intra_op_thread_count": str(CPU_INTRA_OP_THREADS)} | self.first_step_parameters

    @property
    def model_parameters(self) -> dict[str, str]:
        """The native onnxruntime backend's settings of the model step (its config.pbtxt); without a fused variant,
        also its graph's runner settings, which the in-process chain reads (the backend ignores them)."""
        way = cpu_model_step(self.pipeline.cpu_model_step, bool(self.model_step.max_queue_size))
        threads = {"intra_op_thread_count": str(way.threads)} if self.device == "cpu" else {}
        return threads if self.pipeline.has_fused_variant else threads | self.runner_parameters

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
        samples += tuple(WarmupSample(1, self.buckets[0], dims, name) for name, dims in self.warmup_inputs)
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
    def admission_parameters(self) -> dict[str, str]:
        """Where a Python first step feeds a model step whose queue is bounded: whom it admits for, and that
        queue's budget and bound (serving/admission.py). It refuses before tokenizing what the queue would refuse."""
        model = self.model_step
        if not (self.pipeline.runs_python(FIRST) and model.max_queue_size and model.max_queue_wait_us):
            return {}
        return {ADMIT_BEHIND: model.name, ADMIT_BUDGET_US: str(model.max_queue_wait_us),
                ADMIT_BOUND: str(model.max_queue_size)}

    @property
    def fused_model_step(self) -> StepSpec:
        """The fused variant's model step. As the fused step it holds its queue bound itself
        (serving/fused_step.py, a parameter) and its config none: Triton's bound turns off the batcher's
        prefetching, and with it the wake-up that Triton 2.51 loses."""
        if not self.pipeline.fuses:
            return self.model_step
        return dataclasses.replace(self.model_step, instance_count=self.fused_model_instances, max_queue_size=0)

    @property
    def fused_model_ragged(self) -> bool:
        """Whether the fused variant's model step takes ragged batches: a graph step that regroups rows by length
        itself does; the fused step takes texts."""
        return not self.pipeline.fuses and self.fused_runtime.ragged

    @property
    def fused_model_inputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.fused_model_inputs(self)

    @property
    def fused_model_outputs(self) -> tuple[TensorSpec, ...]:
        return self.pipeline.fused_model_outputs(self)

    @property
    def runner_parameters(self) -> dict[str, str]:
        """How serving/onnx_model.py runs MODEL_FILE: the fused step, or the in-process chain."""
        return {
            "onnx_file": MODEL_FILE,
            "intra_op_threads": str(self.fused_runtime.intra_op_threads),
            "allow_spinning": str(int(self.fused_runtime.allow_spinning)),
            "data_parallel": str(int(self.fused_runtime.data_parallel)),
            "buckets": ",".join(map(str, self.buckets)),
            "pad_id": str(self.pad_token_id),
        }

    @property
    def fused_model_parameters(self) -> dict[str, str]:
        runner = self.runner_parameters
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
