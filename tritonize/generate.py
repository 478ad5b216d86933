"""`tritonize generate`: model folder -> verified ONNX -> Triton model repository.

Options come from defaults, then a YAML file (--config), then explicit flags;
the effective set is written into the repository as tritonize.yaml.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
from pathlib import Path

import yaml
from rich.markup import escape

from . import repository, tasks
from .console import err, phase
from .errors import TokenizerRefused, TritonizeError
from .manifest import BASELINE_KEY, CAPABILITIES_KEY, RESOLVED_KEY, choose, entries, find_manifests
from .spec import (
    CONTAINER_MODEL_INSTANCES,
    FUSED_CONFIG_NAME,
    FUSED_STEP_INSTANCES,
    MANIFEST_FILE,
    MIN_QUEUE_SIZE,
    MODELS_KEY,
    RUNS_MODEL_FILE,
    TOKENIZER_FILE,
    TOKENIZER_LAYOUTS,
    int_list,
)
from .spec.options import DEVICES, PRECISIONS, GenerateOptions, device_defaults
from .tasks.task import calibration_texts


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="export a Hugging Face encoder and write a Triton model repository")
    d = GenerateOptions()
    # Every default is None here so that YAML values are only overridden by flags the user typed.
    p.add_argument("--model", "-m", help="a transformers or sentence-transformers folder (or a hub id)")
    p.add_argument("--config", "-c", type=Path, help="YAML file with any of these options (flags win)")
    p.add_argument("--task", choices=tasks.NAMES, help="detected from the folder when omitted")
    p.add_argument("--name", help="ensemble name (default: the folder name); with --add, the model's name in the "
                   "repository; with --version or a --config of several models, which model")
    p.add_argument("--max-length", type=int, help="tokens per text (default: what the model declares)")
    _task_flags(p, "max_length")
    p.add_argument("--baseline", help="a text file, one text per line (pairs: the two texts split by a tab), whose "
                   "answers are the output statistics' baseline: the histograms' bounds and the shares drift is measured "
                   "against (default: the verification texts and 200 texts of the shipped corpus)")
    _task_flags(p, "baseline")
    p.add_argument("--tokenizer", choices=TOKENIZER_LAYOUTS, help="where the repository tokenizes: in ONNX graphs "
                   "onnxruntime serves, no Python per request, where that is exact (WordPiece and byte-level BPE "
                   "tokenizers of one text a row; else the Python step, saying why): on CPU inside the model step's "
                   f"graph, on GPU a step of its own on the CPU; or in a Python step (default: {d.tokenizer})")
    p.add_argument("--output", "-o", help=f"repository directory (default: {d.output})")
    cpu, gpu, gpu_trt = device_defaults("cpu"), device_defaults("gpu"), device_defaults("gpu", tensorrt=True)
    p.add_argument("--device", choices=DEVICES, help=f"instance kind of the model step in the container (default: "
                   f"{d.device}); it decides the defaults of --precision, --optimize and --max-batch-size")
    p.add_argument("--precision", choices=PRECISIONS, help=f"fp16 is held to --min-cosine-fp16, int8 is CPU only "
                   f"(default: {cpu.precision} on CPU, {gpu.precision} on GPU)")
    p.add_argument("--optimize", action=argparse.BooleanOptionalAction, default=None,
                   help=f"onnxruntime transformer fusions (default: {_on(cpu.optimize)} on CPU, {_on(gpu.optimize)} "
                   f"on GPU, {_on(gpu_trt.optimize)} with --tensorrt)")
    p.add_argument("--tensorrt", action=argparse.BooleanOptionalAction, default=None, help="TensorRT accelerator in the container (needs --device gpu)")
    p.add_argument("--max-batch-size", type=int, help=f"rows per batch and per request (default: "
                   f"{cpu.max_batch_size} on CPU, {gpu.max_batch_size} on GPU)")
    p.add_argument("--max-queue-delay-us", type=int, help=f"dynamic batching delay (default: {d.max_queue_delay_us})")
    p.add_argument("--max-queue-size", type=int, help="requests each step holds waiting before it answers UNAVAILABLE / 503 "
                   f"(default: --queue-budget-ms of work at --capacity-rps, at least {MIN_QUEUE_SIZE}; 0: no bound)")
    p.add_argument("--queue-budget-ms", type=int, help=f"work a full queue holds (default: {d.queue_budget_ms})")
    p.add_argument("--capacity-rps", type=float, help="requests/s the server answers at full load (default: unmeasured, "
                   "so the queues hold the floor; `tritonize tune` measures it)")
    p.add_argument("--max-request-bytes", type=int, help=f"bytes of text one request may carry, its texts summed (default: "
                   f"{d.max_request_bytes}; 0: no bound)")
    p.add_argument("--truncate", action=argparse.BooleanOptionalAction, default=None,
                   help="serve a text longer than the max length as its first tokens (default); --no-truncate refuses it")
    p.add_argument("--model-runs", action=argparse.BooleanOptionalAction, default=None,
                   help="on a CPU behind the Python tokenizer step: the production model step runs its batch's rows "
                   "grouped by length, at most 2,048 tokens a run, inside its graph (model_runs.onnx beside model.onnx; "
                   "default: on; docs/reliability.md)")
    p.add_argument("--tokenizer-instances", type=int, help=f"(default: {d.tokenizer_instances})")
    p.add_argument("--model-instances", type=int, help=f"(default: {CONTAINER_MODEL_INSTANCES} in the production configs, "
                   f"{FUSED_STEP_INSTANCES} in the fused step, which pipelines its batches)")
    p.add_argument("--gather-us", type=int, help="the fused step: how long a run may wait for the clients "
                   f"the previous run answered, so a few clients share one run; a lone client never waits (default: "
                   f"{d.gather_us}; 0: run what waits at once)")
    p.add_argument("--buckets", type=int_list, help="padding lengths, e.g. 16,32,64,128 (default: powers of two up to the max length)")
    p.add_argument("--opset", type=int, help=f"ONNX opset, 17 or later (default: {d.opset})")
    p.add_argument("--trust-remote-code", action="store_true", default=None, help="allow code shipped in the model folder to run")
    p.add_argument("--version", type=int, help="version folder to write; into an existing repository, a version above "
                   "its own joins it with that repository's options (switch with `deploy.py local switch`)")
    p.add_argument("--add", action="store_true", default=None,
                   help="add this model to the repository at --output, beside the models already there, under its "
                   "own --name (default: replace the repository)")
    p.add_argument("--force", action="store_true", default=None, help="replace an output directory not written by "
                   "tritonize, or a repository of several models")
    p.add_argument("--skip-verify", action="store_true", default=None, help="do not compare the ONNX graph with PyTorch")
    p.add_argument("--atol", type=float, help=f"max-abs tolerance for fp32 graphs (default: {d.atol})")
    p.add_argument("--min-cosine-fp16", type=float, help=f"cosine tolerance for fp16 graphs (default: {d.min_cosine_fp16})")
    p.add_argument("--min-cosine-int8", type=float, help=f"per-text cosine an int8 graph keeps of fp32 (default: {d.min_cosine_int8})")
    p.set_defaults(func=run)


def _task_flags(p: argparse.ArgumentParser, after: str) -> None:
    """The flags of the tasks' own options (`GenerateOptions.task_options`) that follow the field `after`."""
    for option in GenerateOptions.task_options:
        if option.after != after:
            continue
        if option.switch:
            p.add_argument(option.flag, action=argparse.BooleanOptionalAction, default=None, help=option.help)
        else:
            p.add_argument(option.flag, choices=option.choices, type=option.parse, help=option.help)


def _on(value: bool | None) -> str:
    return "on" if value else "off"


def resolve_options(args: argparse.Namespace) -> GenerateOptions:
    """defaults <- (a new version: the repository's own options) <- YAML file <- flags typed on the command line."""
    values: dict = {}
    if args.config:
        if not args.config.is_file():
            raise TritonizeError(f"config file {args.config} does not exist")
        try:
            loaded = yaml.safe_load(args.config.read_text()) or {}
        except yaml.YAMLError as exc:
            raise TritonizeError(f"{args.config} is not valid YAML: {exc}") from exc
        if not isinstance(loaded, dict):
            raise TritonizeError(f"{args.config} must hold a mapping of option: value")
        if MODELS_KEY in loaded:  # a repository's manifest of several models: the entry --name names
            loaded = _entry(entries(loaded, str(args.config)), args.name, args.config)
        known = set(GenerateOptions.field_names()) | {RESOLVED_KEY, BASELINE_KEY, CAPABILITIES_KEY}
        unknown = sorted(set(k.replace("-", "_") for k in loaded) - known)
        if unknown:
            raise TritonizeError(f"unknown option(s) in {args.config}: {', '.join(unknown)}")
        values.update({k.replace("-", "_"): v for k, v in loaded.items()})
        values.pop(RESOLVED_KEY, None)  # informational, written by generate
        values.pop(BASELINE_KEY, None)
        values.pop(CAPABILITIES_KEY, None)
    for key in GenerateOptions.field_names():
        value = getattr(args, key, None)
        if value is not None:
            values[key] = value
    if values.get("version") is not None and not values.get("add"):
        values = {**_repository_options(values.get("output") or GenerateOptions.output, values.get("name")), **values}
    options = GenerateOptions(**values)
    if not options.model:
        raise TritonizeError("no model given", hint="pass --model PATH, or set model: in the --config file")
    for key, allowed in (("task", tasks.NAMES), ("precision", PRECISIONS)):  # a device: GenerateOptions refuses it
        value = getattr(options, key)
        if value is not None and value not in allowed:
            raise TritonizeError(f"{key} must be one of {', '.join(allowed)} (got {value!r})")
    return options


# What a new version takes from the model folder or the command line, never from the version before it.
NOT_INHERITED = ("model", "version", "force", "skip_verify", "trust_remote_code")


def _repository_options(output: str, name: str | None) -> dict:
    """The options the model a new version joins was generated with (the only one, or --name): a new version
    must fit its configs. A name the repository does not hold inherits nothing (`repository.joins` refuses it)."""
    manifests = find_manifests(output)
    if name and name not in {m.name for m in manifests}:
        return {}
    current = choose(manifests, name, output, "--name") if manifests else None
    if current is None:
        return {}
    return {k: v for k, v in current.options.to_dict().items() if k not in NOT_INHERITED}


def _entry(models: list[dict], name: str | None, origin: Path) -> dict:
    """The entry of a manifest of several models that --name names."""
    listed = [str(m.get("name")) for m in models]
    if not name or name not in listed:
        raise TritonizeError(f"{origin} describes {len(models)} models ({', '.join(listed)})"
                             + (f", not {name!r}" if name else ": name one"), hint="pass --name NAME")
    return models[listed.index(name)]


def run(args: argparse.Namespace) -> int:
    generate(resolve_options(args))
    return 0


def generate(options: GenerateOptions) -> Path:
    """The whole pipeline; returns the repository path."""
    from . import baseline, graph_tokenizer, source, verify

    if options.add and options.force:
        raise TritonizeError("--add keeps every model of the repository and --force replaces the repository: choose one")
    if options.add and options.version is not None:
        raise TritonizeError("--add writes a new model, whose first version is 1; --version adds a version to a model "
                             "already there", hint="drop --version, or drop --add and name the model with --name")
    with phase("Reading the model folder"):
        spec = source.read_model(options)
    task = tasks.of(spec.head)
    calibration_source, calibrating = calibration_texts(options.calibration) if task.calibrator.calibrates else ("", [])
    baseline_source, baseline_rows = baseline.baseline_rows(task, options.baseline)
    name = options.name or source.default_name(options.model)
    output = Path(options.output)
    # A model joining a repository names its fused configs as the repository's models do.
    joining = options.add or options.version is not None
    fused_config = repository.fused_config_name(output) if joining else FUSED_CONFIG_NAME
    refusal = repository.graph_refusal(options, spec)
    if refusal is not None:  # graphs cannot serve this model: its Python step, said in one line
        options = _python_tokenizer(refusal, options)
    repo = repository.plan(options, spec, name, fused_config)
    joined, index = _placed(output, options, repo, spec, name)
    staging = repository.staging_dir(output)
    try:
        artifacts, report = _exported_and_verified(spec, options, staging / "work")
        graph_files: dict[str, Path] = {}
        if repo.pipeline.graph_tokenizes:
            try:
                with phase("Tokenizing inside the graph, compared with the served tokenizer"):
                    graph_files = graph_tokenizer.build(repo, artifacts.onnx, [r[0] for r in task.verifier.verification_rows()],
                                                        staging / "graph", options.atol)
            except TokenizerRefused as exc:
                options = _python_tokenizer(exc, options)
                repo = repository.plan(options, spec, name, fused_config)
        if repo.model_runs:
            repo, graph_files = _model_runs(repo, artifacts, spec, task, staging / "runs", options.atol, graph_files)
        calibration = None
        if task.calibrator.calibrates:
            with phase(f"Recording quantization ranges from {len(calibrating)} texts ({calibration_source})"):
                rows = [(text,) for text in calibrating]
                batches = [(part, task.exporter.graph_feeds(spec, feeds)) for part, feeds in verify.length_sorted_batches(spec, rows)]
                served = verify.run_batches(artifacts.onnx, batches)
                calibration = task.calibrator.calibration(spec, served, calibration_source, artifacts.onnx)
        files = repository.render(repo, repository.manifest(options, repo), report, index, calibration)
        binaries = {f"{repo.model_name}/{repo.version}/{f.name}": f for f in artifacts.files_for(artifacts.onnx)}
        for python_step in repo.tokenizer_folders:
            binaries[f"{python_step.name}/{repo.version}/{TOKENIZER_FILE}"] = Path(spec.tokenizer_file)
        binaries.update(repository.served_files(repo))
        binaries.update(graph_files)
        with phase(f"Recording the baseline of its answers on {len(baseline_rows)} rows ({baseline_source})"):
            statistics = baseline.record(repo, files, binaries, baseline_rows, baseline_source, staging / "baseline")
        files = repository.render(repo, repository.manifest(options, repo, statistics), report, index, calibration,
                                  statistics)
        if joined is not None:
            with phase(f"Adding version {repo.version} to {output}"):
                repository.add_version(files, binaries, output, staging, repo.version)
        elif index:
            with phase(f"Adding {name} to {output}"):
                repository.add_model(files, binaries, output, staging, repo.version)
        else:
            with phase(f"Writing the repository to {output}"):
                repository.write(files, binaries, output, staging, force=options.force, version=repo.version)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _say_ready(output, name, report, index, joined is not None)
    return output


def _model_runs(repo, artifacts, spec, task, work: Path, atol: float, graph_files: dict[str, Path]):
    """The model step's graph run in runs (RUNS_MODEL_FILE), checked on the verification rows in one batch of
    mixed lengths; a graph kept in external data (over 2 GB) stays whole, said in one line."""
    from . import verify
    from .graph_tokenizer.bucketed import runs_graph

    if len(artifacts.files_for(artifacts.onnx)) > 1:
        err.print("[yellow]the model step runs its batches whole: its graph keeps its weights in external data[/]")
        return dataclasses.replace(repo, model_runs=False), graph_files
    with phase("Cutting the model step's batches in runs by length, compared with its graph"):
        target = runs_graph(artifacts.onnx, repo.buckets, verify.tokenize(spec, task.verifier.verification_rows()),
                            work / RUNS_MODEL_FILE, atol)
    return repo, {**graph_files, f"{repo.model_name}/{repo.version}/{RUNS_MODEL_FILE}": target}


def _placed(output: Path, options: GenerateOptions, repo, spec, name: str):
    """Where the model goes: a version joining its model (the joined index), a model joining a repository (its
    index), or a new repository ([]). Everything that can refuse is asked here, before minutes of export."""
    from . import verify

    joined = repository.joins(output, options)
    index = repository.check_add(output, repo) if options.add else []  # the models it joins ([]: a new repository)
    if joined is not None:
        index = repository.read_index(output)
    elif not index:
        repository.check_output(output, options.force)
    err.print(
        f"[bold]{name}[/]: {spec.architecture}, task {spec.task}, {escape(repo.description)}"
        f", max length {spec.max_length}, buckets {list(repo.buckets)}"
    )
    if joined is not None:  # the configs a version shares with the others, checked before minutes of export
        repository.check_joins(repository.model_files(repo, verify.VerificationReport.skipped_report()), output)
        err.print(f"version {repo.version} of {name} joins {output} (versions "
                  f"{', '.join(map(str, repository.versions(output, name)))}), with its options in {MANIFEST_FILE}")
    elif index:
        err.print(f"{name} joins {output} beside {', '.join(e.name for e in index)}")
    return joined, index


def _exported_and_verified(spec, options: GenerateOptions, work: Path):
    """The exported graphs and their verification against the model's own library (checked: a failure raises)."""
    from . import export, verify

    graph = export.load_torch_model(spec)
    artifacts = export.export(spec, work, opset=options.opset, optimize=options.optimize,
                              fp16=options.precision == "fp16", int8=options.precision == "int8",
                              use_gpu=options.device == "gpu", graph=graph)
    if options.skip_verify:
        return artifacts, verify.VerificationReport.skipped_report()
    fp16_stages = {"fp16"} | ({"optimize"} if options.precision == "fp16" else set())
    report = verify.verify(spec, graph, artifacts.stages, fp16_stages, options.atol, options.min_cosine_fp16,
                           options.min_cosine_int8)
    report.export_seconds = {k: round(v, 2) for k, v in artifacts.seconds.items()}
    verify.check(report)
    return artifacts, report


def _say_ready(output: Path, name: str, report, index: list, joined: bool) -> None:
    """Where the repository is, how it compared with the model's library, and the command that serves it."""
    summary = report.summary()
    err.print(f"[bold green]Repository ready[/] at {output}" + (f"  (vs {report.reference}: {summary})" if summary else ""))
    if joined:
        pick = f" --model {name}" if len(index) > 1 else ""
        err.print(f"Switch a running server to it: python deploy.py local switch --repository {output}{pick}")
    elif index:
        err.print(f"Serve {', '.join([*(e.name for e in index), name])} together: python deploy.py local up "
                  f"--repository {output} (a server already running loads {name} when it restarts)")
    else:
        err.print(f"Serve it: python deploy.py local up --repository {output}")


def _python_tokenizer(refusal: TokenizerRefused, options: GenerateOptions) -> GenerateOptions:
    """The options with the Python tokenizer step, the graph's refusal said in one line (generation goes on)."""
    err.print(f"[yellow]the tokenizer as graphs (no Python per request) refused: {escape(str(refusal))}[/]; the "
              "repository tokenizes in a Python step")
    return dataclasses.replace(options, tokenizer="python")
