"""The shape of a task's ensemble (`Pipeline`): its steps, what each takes and returns, and the ensemble's
steps in both variants."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Literal, Protocol

from ..errors import TokenizerRefused
from .model import ROW_OUTPUTS, TensorSpec
from .names import (
    FIRST,
    REQUEST_CUTS,
    GRAPH_LIBRARY_FILE,
    GRAPH_MODEL_FILE,
    MODEL,
    MODEL_FILE,
    POST,
    STATISTICS,
    STATISTICS_MODULE,
    TOKEN_EXTRAS,
    TEXTS_GRAPH_FILE,
    TOKENIZER_GRAPH_FILE,
    TOKEN_INPUTS,
    checked_text,
    StepRole,
    graph_tensor,
)

InstanceKind = Literal["KIND_CPU", "KIND_GPU"]


@dataclass(frozen=True)
class CpuModelStep:
    """How the production model step runs on a CPU: its instances (where --model-instances does not say),
    onnxruntime's threads in each (0: one per core) and whether Triton bounds its queue."""

    instances: int
    threads: int
    bounded: bool


# Two instances of one thread each behind a bounded queue: a second instance waits while the first runs, so Triton
# 2.51's batcher, which loses a wake-up on a bounded queue (docs/benchmark.md, the 500 ms stalls), is rarely left
# waiting on the busy one; and each instance's one thread leaves the other core to the steps beside it.
SHARED_CORES = CpuModelStep(instances=2, threads=1, bounded=True)


def cpu_model_step(own: CpuModelStep, bounded: bool) -> CpuModelStep:
    """A pipeline's way (`own`), or SHARED_CORES where the step's queue is bounded (the default; --max-queue-size 0
    asks none) and `own` runs unbounded: a bounded queue needs a second instance for the batcher's lost wake-up,
    and two instances one thread each."""
    return SHARED_CORES if bounded and not own.bounded else own


@dataclass(frozen=True)
class StepSpec:
    """One Triton model of the repository: its role in the ensemble, batching and placement."""

    role: StepRole
    name: str
    module: str  # the served module (tritonize/serving/<module>.py) its Python runtime runs as model.py
    max_batch_size: int
    max_queue_delay_us: int
    instance_count: int
    kind: InstanceKind
    max_queue_size: int = 0  # 0: no bound
    batches: bool = True  # Triton's dynamic batcher merges its requests; False: each runs on its own
    # With a bound, a request waiting longer than this is refused (Triton's default_timeout_microseconds): the
    # requests a bound admits wait about the budget whatever their length; the size alone let 512 queued
    # 128-token requests wait 12.9 s (p50) at 4 x capacity on the production configs, 4.2 s with it (of which a
    # run of 64 such rows on one onnxruntime thread takes about 2 s; docs/reliability.md). 0: no time bound.
    max_queue_wait_us: int = 0


class Planned(Protocol):
    """What a pipeline reads of the repository it shapes (`RepoSpec`, which holds the pipeline)."""

    text_inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    graph_outputs: tuple[TensorSpec, ...]
    statistics: tuple[tuple[str, str], ...]
    @property
    def first_step(self) -> StepSpec: ...

    @property
    def model_step(self) -> StepSpec: ...

    @property
    def post_step(self) -> StepSpec | None: ...

    @property
    def statistics_step(self) -> StepSpec | None: ...

    @property
    def model_name(self) -> str: ...

    @property
    def token_inputs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def ensemble_outputs(self) -> tuple[TensorSpec, ...]: ...


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

    `RepoSpec` holds it and asks it; planning makes a step of each role it declares, rendering and the version
    switch walk those steps, the bench and `chain` ask it for each role's served module and class; templates lay
    out what it answers. A new shape is a new subclass here, and nothing else branches on which shape a task has.
    """

    # The steps it may have, in the ensemble's order (a statistics step only where the task's statistics read
    # the graph's outputs: RepoSpec then holds one).
    roles: ClassVar[tuple[StepRole, ...]] = (FIRST, MODEL)
    first_module: ClassVar[str] = "tokenizer"  # the first step's served module (tritonize/serving/<name>.py)
    post_module: ClassVar[str | None] = None  # the post step's, where one follows the model step
    # The class of each Python step's served module that holds its logic (TritonPythonModel only adapts it), by
    # role key: what `chain.in_process` builds from the step's config.
    served_classes: ClassVar[dict[str, str]] = {FIRST.key: "TextEncoder", MODEL.key: "OnnxRunner"}
    # Whether the first step calls the model step itself and answers (business logic scripting).
    orchestrates: ClassVar[bool] = False
    # What the served ensemble can do beyond its task's plain answer, recorded in the manifest for the API.
    capabilities: ClassVar[tuple[str, ...]] = ()

    @property
    def counts_after_graph(self) -> bool:
        """Whether no served step follows the graph in the production ensemble, so that a statistics step must
        count what it answers."""
        return STATISTICS in self.roles

    def served_module(self, role: StepRole) -> str:
        """The served module a step of `role` runs as model.py (tritonize/serving/<module>.py)."""
        modules = {FIRST: self.first_module, MODEL: self.model_module, POST: self.post_module,
                   STATISTICS: STATISTICS_MODULE}
        module = modules.get(role)
        if module is None or role not in self.roles:
            raise ValueError(f"{type(self).__name__} has no {role.key} step")
        return module

    def idles_in_fused(self, role: StepRole) -> bool:
        """Whether a step of `role` idles in the fused variant, where another step does its work: the first step
        where the fused step tokenizes, and the statistics step, whose counting the fused step does."""
        return role is STATISTICS or (role is FIRST and self.fuses)

    def runs_python(self, role: StepRole) -> bool:
        """Whether the step of `role` runs a served Python module (as model.py) in a variant the repository has:
        the model step only in the fused variant."""
        return self.has_fused_variant if role is MODEL else not self.runs_graph(role)

    def runs_graph(self, role: StepRole) -> bool:
        """Whether the production step of `role` is a graph onnxruntime serves, with no Python module: the first
        step where the pipeline declares its file (`first_file`)."""
        return role is FIRST and self.first_file is not None

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
    def first_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """What the first step returns."""

    def post_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """What the post step takes (nothing without one)."""
        return ()

    @abc.abstractmethod
    def ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        """The production ensemble's steps."""

    def fused_ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        """The fused variant's ensemble steps."""
        return self.ensemble_steps(repo)

    def fused_model_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The fused variant's model step's inputs."""
        return repo.token_inputs

    def fused_model_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The fused variant's model step's outputs."""
        return repo.graph_outputs

    def watched_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The graph's outputs a statistics step counts in the production ensemble (none: a served step that
        follows or drives the graph counts them)."""
        return ()

    def tokenizer_folders(self, repo: Planned) -> tuple[StepSpec, ...]:
        """The steps whose version folder holds tokenizer.json: each that tokenizes or decodes words."""
        return tuple(s for s in (repo.first_step, repo.model_step if self.fuses else None, repo.post_step) if s)

    def model_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The production model step's inputs."""
        return repo.token_inputs

    def model_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The production model step's outputs."""
        return repo.graph_outputs

    model_file: ClassVar[str] = MODEL_FILE  # the production model step's graph
    # Whether the repository has a fused variant (configs/<fused>.pbtxt: the model step a Python step); without
    # one, both variants serve the production configs.
    has_fused_variant: ClassVar[bool] = True
    # Whether the first step batches requests (Triton's dynamic batcher) or runs each on its own.
    first_batches: ClassVar[bool] = True
    cpu_model_step: ClassVar[CpuModelStep] = SHARED_CORES
    model_libraries: ClassVar[tuple[str, ...]] = ()  # operator libraries it loads, in its folder
    # Where the production first step is a graph onnxruntime serves (no Python): its file, and the operator
    # libraries it loads, in its folder.
    first_file: ClassVar[str | None] = None
    first_libraries: ClassVar[tuple[str, ...]] = ()

    @property
    def graph_tokenizes(self) -> bool:
        """Whether a graph of the production ensemble tokenizes (graph_tokenizer.py builds it)."""
        return bool(self.model_libraries or self.first_libraries)

    def for_device(self, device: str) -> Pipeline:
        """This shape as served on `device` ("cpu" or "gpu")."""
        return self

    def in_graph(self) -> Pipeline:
        """This shape with the tokenizer inside the model step's graph; refused in one line where it has none."""
        raise TokenizerRefused(f"the graph tokenizer serves a tokenizer step followed by the model alone; "
                               f"this task's ensemble is {type(self).__name__}")


@dataclass(frozen=True)
class TokenizeModel(Pipeline):
    """tokenize -> model: the first step tokenizes, and the graph's outputs are the answer. The fused variant runs
    the two as one step, raw strings in."""

    roles: ClassVar[tuple[StepRole, ...]] = (FIRST, MODEL, STATISTICS)
    # serving/tokenizer.py cuts a request's texts at their start or into windows where its parameters ask (`Cut`).
    capabilities: ClassVar[tuple[str, ...]] = (REQUEST_CUTS,)

    @property
    def row_outputs(self) -> tuple[TensorSpec, ...]:
        """Token counts and the truncated flag: the first step tokenizes, so it knows them."""
        return ROW_OUTPUTS

    def extra_token_outputs(self) -> tuple[TensorSpec, ...]:
        """Tokenizer outputs that only a post step reads."""
        return ()

    def first_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return repo.token_inputs + self.extra_token_outputs() + self.row_outputs

    def watched_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The graph's outputs a statistics step counts in the production ensemble: those the task's output
        statistics read, where no served step follows the graph (serving/statistics_step.py)."""
        reads = {tensor for _, tensor in repo.statistics}
        return tuple(t for t in repo.graph_outputs if t.name in reads) if repo.statistics_step else ()

    def post_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        """The served steps after the graph, in both variants."""
        return ()

    def ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
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

    def fused_ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        """The first step and the model step as one (which counts what the graph answers itself), then the
        served steps after them."""
        fused = EnsembleStep(repo.model_name, _same(repo.text_inputs), _same(self.fused_model_outputs(repo)))
        return (fused,) + self.post_steps(repo)

    def fused_model_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The texts: the fused step tokenizes them itself."""
        return repo.text_inputs

    def fused_model_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The graph's outputs, and the first step's tensors that the ensemble passes on."""
        onward = {t.name for t in repo.ensemble_outputs + self.post_inputs(repo)}
        return repo.graph_outputs + tuple(t for t in self.first_outputs(repo) if t.name in onward)

    def in_graph(self) -> Pipeline:
        return TokenizeInGraph()


@dataclass(frozen=True)
class GraphTokenized(TokenizeModel):
    """tokenize -> model with no Python where it serves: the first step is a graph onnxruntime runs on the CPU,
    each request on its own (`first_batches`), so that a request it refuses (serving/texts.py's checks, made by
    the graph: graph_tokenizer/texts.py) fails alone; and the model step is a graph. No statistics step (the
    answers' statistics are counted where they are read: the HTTP API), and no fused variant: both variants serve
    the production configs."""

    first_libraries: ClassVar[tuple[str, ...]] = (GRAPH_LIBRARY_FILE,)
    roles: ClassVar[tuple[StepRole, ...]] = (FIRST, MODEL)
    has_fused_variant: ClassVar[bool] = False
    capabilities: ClassVar[tuple[str, ...]] = ()  # the graphs read every text from its start
    first_batches: ClassVar[bool] = False

    def tokenizer_folders(self, repo: Planned) -> tuple[StepSpec, ...]:
        """The first step's, where the API and the in-process chain read the tokenizer."""
        return (repo.first_step,)

    def in_graph(self) -> Pipeline:
        return self


@dataclass(frozen=True)
class TokenizeInGraph(GraphTokenized):
    """texts -> tokenize and model as one graph, on the CPU: the first step checks each request's texts and hands
    them on; the model step tokenizes inside its graph and runs the model per bucket its batch's rows fall in,
    RUN_TOKENS tokens a run at most (graph_tokenizer/bucketed.py), returning the row outputs besides the graph's."""

    first_file: ClassVar[str | None] = TEXTS_GRAPH_FILE
    model_file: ClassVar[str] = GRAPH_MODEL_FILE
    model_libraries: ClassVar[tuple[str, ...]] = (GRAPH_LIBRARY_FILE,)
    # Where --max-queue-size 0 asks no queue bound: one instance on every core (nothing beside it needs a core, a
    # lone text runs on every core, and with no bound Triton's batcher prefetches and loses no wake-up). By default
    # the queue is bounded and the step runs as SHARED_CORES (`cpu_model_step`): MiniLM, two cores, one bench run
    # (docs/benchmark.md), 16-token texts at concurrency 1/4/16 237/374/681 req/s unbounded against 176/416/606
    # bounded, mixed lengths 167/202/230 against 111/222/251; under 4x overload the unbounded queue answered at a
    # p50 of 15 s, the bounded one at 1.2 s and refused the rest at once.
    cpu_model_step: ClassVar[CpuModelStep] = CpuModelStep(instances=1, threads=0, bounded=False)

    def first_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(checked_text(t.name), t.triton_type, t.dims) for t in repo.text_inputs)

    def ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        checked = {t.name: checked_text(t.name) for t in repo.text_inputs}
        return (EnsembleStep(repo.first_step.name, _same(repo.text_inputs), {c: c for c in checked.values()}),
                EnsembleStep(repo.model_name, checked, _same(self.model_outputs(repo))))

    def model_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return repo.text_inputs

    def model_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return repo.graph_outputs + self.row_outputs

    def for_device(self, device: str) -> Pipeline:
        return TokenizeGraphStep() if device == "gpu" else self


@dataclass(frozen=True)
class TokenizeGraphStep(GraphTokenized):
    """tokenize -> model, the tokenizer's graph (the texts' checks first) a step of its own on the CPU before the
    model step on the GPU: how a GPU serves the graph tokenizer. Each request is tokenized on its own and padded
    to its bucket, so the model step batches requests of one bucket, as behind the Python tokenizer step.

    In one graph, onnxruntime's CUDA provider takes the tokenizer's integer operators (the string operators stay
    on the CPU, with a copy at each crossing), and its Compress fails on an empty condition ("CUDA failure 1:
    invalid argument", onnxruntime-gpu 1.31.1 on an H200): the warm-up's empty text, and any batch whose words
    the vocabulary holds whole. A step of its own keeps every tokenizer operator on the CPU provider.
    """

    first_file: ClassVar[str | None] = TOKENIZER_GRAPH_FILE


@dataclass(frozen=True)
class TokenizeModelPost(TokenizeModel):
    """tokenize -> model -> post: a served step turns the graph's outputs into the answer, reading besides them
    the tokenizer outputs it names and (unless it reads the graph's outputs alone) the texts and their encoding."""

    module: str  # the post step's served module
    token_extras: tuple[str, ...] = ()  # tokenizer outputs only the post step reads (TOKEN_EXTRAS)
    reads_text: bool = True  # the post step takes the texts and their encoding besides the graph's outputs

    roles: ClassVar[tuple[StepRole, ...]] = (FIRST, MODEL, POST)  # the post step counts what it answers
    served_classes: ClassVar[dict[str, str]] = {**TokenizeModel.served_classes, POST.key: "PostStep"}

    @property
    def post_module(self) -> str:  # type: ignore[override]
        return self.module

    def extra_token_outputs(self) -> tuple[TensorSpec, ...]:
        return tuple(TensorSpec(n, "TYPE_INT64", TOKEN_EXTRAS[n]) for n in self.token_extras)

    def in_graph(self) -> Pipeline:
        return Pipeline.in_graph(self)  # the post step reads the tokenizer's encoding

    def post_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        """The texts, their encoding (real lengths, offsets, special tokens) and the model's outputs; the model's
        outputs alone where the post step reads nothing else."""
        if not self.reads_text:
            return repo.graph_outputs
        ids_and_mask = tuple(t for t in repo.token_inputs if t.name in TOKEN_INPUTS)
        return repo.text_inputs + ids_and_mask + self.extra_token_outputs() + repo.graph_outputs

    def post_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        return (EnsembleStep(repo.post_step.name, _same(self.post_inputs(repo)), _same(repo.outputs)),)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Orchestrated(Pipeline):
    """An orchestrating first step: it calls the model step itself (business logic scripting: one text can
    become several model rows) and answers, so the ensemble is that one step, in both variants."""

    module: str  # the first step's served module

    orchestrates = True
    served_classes: ClassVar[dict[str, str]] = {FIRST.key: "Reader", MODEL.key: "OnnxRunner"}

    @property
    def first_module(self) -> str:  # type: ignore[override]
        return self.module

    @property
    def row_outputs(self) -> tuple[TensorSpec, ...]:
        """None: the first step answers alone."""
        return ()

    def first_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return repo.outputs

    def ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        return (EnsembleStep(repo.first_step.name, _same(repo.text_inputs), _same(repo.outputs)),)


@dataclass(frozen=True)
class PrepareModel(Pipeline):
    """prepare -> model: the first step turns each request's inputs into the graph's (texts into token tensors,
    images into pixels: `extra_inputs`, which no tokenizer makes), and the graph's outputs are the answer. The
    first step is a step of its own in both variants; the fused variant runs the graph on onnx_model.py, which
    regroups rows by length and by the shape of the extra inputs."""

    module: str  # the first step's served module
    served_class: str  # the class in it that holds its logic
    extra_inputs: tuple[TensorSpec, ...] = ()

    roles: ClassVar[tuple[StepRole, ...]] = (FIRST, MODEL)

    @property
    def first_module(self) -> str:  # type: ignore[override]
        return self.module

    @property
    def served_classes(self) -> dict[str, str]:  # type: ignore[override]
        return {FIRST.key: self.served_class, MODEL.key: "OnnxRunner"}

    @property
    def fuses(self) -> bool:
        return False

    @property
    def row_outputs(self) -> tuple[TensorSpec, ...]:
        return ROW_OUTPUTS

    def model_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return repo.token_inputs + self.extra_inputs

    def fused_model_inputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return self.model_inputs(repo)

    def first_outputs(self, repo: Planned) -> tuple[TensorSpec, ...]:
        return self.model_inputs(repo) + self.row_outputs

    def ensemble_steps(self, repo: Planned) -> tuple[EnsembleStep, ...]:
        return (
            EnsembleStep(repo.first_step.name, _same(repo.text_inputs), _same(self.first_outputs(repo))),
            EnsembleStep(repo.model_name, _same(self.model_inputs(repo)), _same(repo.graph_outputs)),
        )


def served(pipeline: Pipeline, tokenizer: str, device: str) -> Pipeline:
    """A task's pipeline as a repository serves it, on `device`: with the tokenizer in graphs where `tokenizer`
    is "graph" (planning asks `repository.planning.graph_refusal` first, and serves the Python step where it
    refuses), else as the task declares it."""
    return (pipeline.in_graph() if tokenizer == "graph" else pipeline).for_device(device)
