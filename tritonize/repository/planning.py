"""Options -> RepoSpec: every name, tensor, batching and placement decision of one model's Triton models, and
what an existing repository decides for a model that joins it (its versions, its fused configs' name)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .. import tasks
from ..errors import TokenizerRefused, TritonizeError
from ..manifest import Manifest, choose, find_manifests
from ..serving.batching import ATTENTION_MASK
from ..spec import (
    CONFIGS_DIR,
    FIRST,
    CONTAINER_MODEL_INSTANCES,
    EARLIER_FUSED_CONFIG_NAME,
    FIRST_VERSION,
    FUSED_CONFIG_NAME,
    FUSED_STEP_INSTANCES,
    MODEL,
    MODEL_FILE,
    POST,
    STATISTICS,
    STATISTICS_INSTANCES,
    VARIANT_CONFIGS,
    FusedRuntimeSpec,
    ModelSpec,
    RepoSpec,
    StepRole,
    TEXT_INPUT,
    StepSpec,
    TensorRTSpec,
    default_queue_size,
    normalise_buckets,
    served,
    step_names,
)
from ..spec.options import GenerateOptions
from ..spec.pipeline import cpu_model_step


def graph_refusal(options: GenerateOptions, model: ModelSpec) -> TokenizerRefused | None:
    """Why this model's repository keeps the Python tokenizer step though graphs are asked for (`--tokenizer
    graph`, the default), in one line; None where graphs serve it, or the Python step is asked for. The tokenizer
    itself is checked later, at generation (graph_tokenizer/, the gate)."""
    if options.tokenizer != "graph":
        return None
    task = tasks.of(model.head)
    texts = tuple(t.name for t in task.contract.text_inputs)
    try:
        task.pipeline.in_graph()
    except TokenizerRefused as exc:
        return exc
    if texts != (TEXT_INPUT,) or task.tokens.truncation_for(model.head) or task.ensemble.first_parameters(model, "", 1):
        return TokenizerRefused(f"the graph tokenizer reads one text a row; {task.name} reads "
                                f"{', '.join(texts)} prepared by its task")
    if not options.truncate:
        return TokenizerRefused("the graph tokenizer truncates; --no-truncate refuses over-long texts, which only "
                                "the Python step can")
    return None


def _checked(options: GenerateOptions, model: ModelSpec, name: str):
    """The model's task, once the options and the name are ones it can be served with."""
    options.check()
    if not name or not all(c.isalnum() or c in "_-." for c in name):
        raise TritonizeError(f"invalid model name {name!r}", hint="use letters, digits, '_', '-' or '.'")
    task = tasks.of(model.head)
    if not options.truncate and not task.tokens.truncates:
        raise TritonizeError(f"--no-truncate does not apply to {task.name}: every context is read whole, in windows")
    if options.precision == "int8" and task.calibrator.int8_figure is None:
        offered = ", ".join(t.name for t in tasks.TASKS.values() if t.calibrator.int8_figure)
        raise TritonizeError(f"--precision int8 is offered for {offered}, where verification measures what it "
                             f"keeps; not for {task.name}", hint="serve it in fp32")
    return task


def plan(options: GenerateOptions, model: ModelSpec, name: str, fused_config: str = FUSED_CONFIG_NAME) -> RepoSpec:
    """Decide names, tensors, batching, placement and runtime parameters of the model's Triton models (the
    ensemble and the steps its task's pipeline runs)."""
    task = _checked(options, model, name)
    names = step_names(name)
    refused = graph_refusal(options, model) is not None
    pipeline = served(task.pipeline, "python" if refused else options.tokenizer, options.device)
    queue_size = (default_queue_size(options.queue_budget_ms, options.capacity_rps) if options.max_queue_size is None
                  else options.max_queue_size)
    buckets = normalise_buckets(options.buckets, model.max_length)
    statistics = tuple(task.contract.statistics.items())
    graph_outputs = task.ensemble.graph_outputs(model.head)
    # A step after the graph in the production ensemble, only to count: where the task's statistics read the
    # graph's outputs and no served step follows it (the pipeline declares a statistics step then).
    counts_graph = any(t.name in dict(statistics).values() for t in graph_outputs)
    # Each role's instances and kind: the model step where --device puts it, every Python step on the CPU.
    cpu = options.device == "cpu"
    cpu_step = cpu_model_step(pipeline.cpu_model_step, options.max_queue_size != 0)
    placement = {
        FIRST: (options.tokenizer_instances, "KIND_CPU"),
        MODEL: (options.model_instances or (cpu_step.instances if cpu else CONTAINER_MODEL_INSTANCES),
                "KIND_CPU" if cpu else "KIND_GPU"),
        POST: (1, "KIND_CPU"),
        STATISTICS: (STATISTICS_INSTANCES, "KIND_CPU"),
    }
    # No queue bound of its own for a statistics step: what reaches it was admitted, and its graph has run; none
    # for a model step whose CPU run keeps its queue unbounded (`CpuModelStep.bounded`, where --max-queue-size 0).
    unbounded = {STATISTICS} | ({MODEL} if cpu and not cpu_step.bounded else set())

    def step(role: StepRole) -> StepSpec:
        instances, kind = placement[role]
        bound = 0 if role in unbounded else queue_size
        return StepSpec(
            role=role,
            name=names[role.key],
            module=pipeline.served_module(role),
            max_batch_size=options.max_batch_size,
            max_queue_delay_us=options.max_queue_delay_us,
            instance_count=instances,
            kind=kind,  # type: ignore[arg-type]
            max_queue_size=bound,
            max_queue_wait_us=1000 * options.queue_budget_ms if bound else 0,
            batches=pipeline.first_batches or role is not FIRST,
        )

    repo = RepoSpec(
        name=name,
        model=model,
        description=task.detector.describe(model.head),
        text_inputs=task.contract.text_inputs,
        outputs=task.ensemble.outputs(model.head),
        labels=task.detector.labels(model.head),
        graph_outputs=graph_outputs,
        truncation=task.tokens.truncation_for(model.head),
        pipeline=pipeline,
        steps=tuple(step(role) for role in pipeline.roles if role != STATISTICS or counts_graph),
        fused_model_instances=options.model_instances or FUSED_STEP_INSTANCES,
        fused_runtime=FusedRuntimeSpec(gather_us=options.gather_us),
        buckets=buckets,
        device=options.device,  # type: ignore[arg-type]
        precision=options.precision,  # type: ignore[arg-type]
        tensorrt=(TensorRTSpec.of(options.precision, model.input_names, buckets, options.max_batch_size)
                  if options.tensorrt else None),
        max_batch_size=options.max_batch_size,
        post_parameters=task.ensemble.post_parameters(model),
        statistics=statistics,
        statistics_module=task.contract.statistics_module,
        first_parameters=task.ensemble.first_parameters(model, names[MODEL.key], options.max_batch_size),
        ensemble_parameters=task.ensemble.ensemble_parameters(model.head),
        warmup_inputs=task.ensemble.warmup_inputs(model.head),
        max_request_bytes=options.max_request_bytes,
        truncate=options.truncate,
        version=options.version or FIRST_VERSION,
        fused_config_name=fused_config,
    )
    return dataclasses.replace(repo, model_runs=model_runs(repo)) if options.model_runs else repo


def model_runs(repo: RepoSpec) -> bool:
    """Whether the production model step runs its batch's rows in runs (RUNS_MODEL_FILE): on a CPU, in fp32 (int8's
    dynamic quantization reads the whole batch's ranges, so its answers would move with the runs), behind a step
    that tokenizes (a graph that tokenizes runs its own), where the graph takes token tensors of [rows, width] with
    an attention mask and answers one value of fixed shape a row, so that a row's answer does not depend on the
    rows beside it."""
    inputs = repo.pipeline.model_inputs(repo)
    return (repo.device == "cpu" and repo.precision == "fp32" and repo.tensorrt is None
            and repo.pipeline.model_file == MODEL_FILE
            and ATTENTION_MASK in {t.name for t in inputs}
            and all(t.triton_type == "TYPE_INT64" and tuple(t.dims) == (-1,) for t in inputs)
            and all(d > 0 for t in repo.pipeline.model_outputs(repo) for d in t.dims))


def fused_config_name(root: Path) -> str:
    """What the fused variant's configs are named in the repository at `root`: FUSED_CONFIG_NAME, or the earlier
    name where the repository was written with it."""
    earlier = f"*/{CONFIGS_DIR}/{EARLIER_FUSED_CONFIG_NAME}.pbtxt"
    return EARLIER_FUSED_CONFIG_NAME if any(Path(root).glob(earlier)) else FUSED_CONFIG_NAME


def variant_config(root: Path, variant: str) -> str | None:
    """The configs a server on the repository at `root` selects for `variant` (Triton's --model-config-name;
    None: each model's config.pbtxt)."""
    if variant not in VARIANT_CONFIGS:
        raise TritonizeError(f"unknown variant {variant!r}", hint=f"use one of: {', '.join(VARIANT_CONFIGS)}")
    return fused_config_name(root) if VARIANT_CONFIGS[variant] else None


def versions(output: Path, name: str | None = None) -> list[int]:
    """The version folders of a model (the only one, or `name`), read from its ensemble's folder (every step
    has the same)."""
    manifests = find_manifests(output)
    current = choose(manifests, name, output, "--name") if manifests else None
    folder = Path(output) / current.name if current else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())


def joins(output: Path, options: GenerateOptions) -> Manifest | None:
    """The manifest of the model a new version joins, or None where generate writes a whole repository.

    A version joins only above every version already there: a version folder a server may have loaded is
    never rewritten in place. In a repository of several models, each model has its own versions.
    """
    if options.version is None:
        return None
    manifests = find_manifests(output)
    if not manifests:
        return None
    names = [m.name for m in manifests]
    if options.name and options.name not in names:
        raise TritonizeError(
            f"{output} has no model {options.name!r} to add version {options.version} to (it holds {', '.join(names)})",
            hint="a new version keeps its model's name; to serve another model beside these, pass --add without --version",
        )
    current = choose(manifests, options.name, output, "--name")
    present = versions(output, current.name)
    if present and options.version <= present[-1]:
        raise TritonizeError(
            f"{output} already has version(s) {', '.join(map(str, present))}"
            f"{f' of {current.name}' if len(manifests) > 1 else ''}: version {options.version} would rewrite "
            "what a server may be serving",
            hint=f"pass --version {present[-1] + 1}",
        )
    return current
