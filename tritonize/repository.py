"""RepoSpec + artifacts -> rendered layout + copied served modules -> schema validation -> written atomically.

Nothing reaches the output directory until every config has parsed into
Triton's own `ModelConfig` protobuf; the new repository is assembled in a
temporary directory beside the output and swapped in by rename, and the
previous repository is put back if the swap fails.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from . import serving, tasks
from .errors import TritonizeError
from .manifest import Manifest, find_manifest, read_manifest
from .paths import TEMPLATES_DIR
from .spec import (
    CONFIG_FILE,
    LABELS_FILE,
    LOCAL_CONFIG_DIR,
    LOCAL_CONFIG_NAME,
    MANIFEST_FILE,
    MODEL_FILE,
    README_FILE,
    SERVED_ENTRY,
    VERIFICATION_FILE,
    FIRST_VERSION,
    GenerateOptions,
    ModelSpec,
    Overrides,
    RepoSpec,
    StepSpec,
    TensorRTSpec,
    default_queue_size,
    normalise_buckets,
    step_names,
)
from .serving.health import HEALTH_FILE
from .verify import VerificationReport


@dataclass(frozen=True)
class RenderedFile:
    path: str  # relative to the repository root
    text: str


def plan(options: GenerateOptions, model: ModelSpec, name: str) -> RepoSpec:
    """Decide names, tensors, batching, placement and runtime parameters of the three Triton models."""
    for label, value in (
        ("--max-batch-size", options.max_batch_size),
        ("--tokenizer-instances", options.tokenizer_instances),
        ("--model-instances", options.model_instances),
    ):
        if value < 1:
            raise TritonizeError(f"{label} must be at least 1 (got {value})")
    for label, value in (("--max-queue-delay-us", options.max_queue_delay_us), ("--max-queue-size", options.max_queue_size),
                         ("--max-request-bytes", options.max_request_bytes)):
        if value is not None and value < 0:
            raise TritonizeError(f"{label} must be 0 or more (got {value})")
    for label, value in (("--queue-budget-ms", options.queue_budget_ms), ("--capacity-rps", options.capacity_rps)):
        if value is not None and value <= 0:
            raise TritonizeError(f"{label} must be more than 0 (got {value})")
    if options.version is not None and options.version < 1:
        raise TritonizeError(f"--version must be at least 1 (got {options.version})")
    if options.tensorrt and options.device != "gpu":
        raise TritonizeError("--tensorrt needs --device gpu", hint="TensorRT runs on NVIDIA GPUs only")
    if not name or not all(c.isalnum() or c in "_-." for c in name):
        raise TritonizeError(f"invalid model name {name!r}", hint="use letters, digits, '_', '-' or '.'")
    task = tasks.of(model.head)
    if not options.truncate and not task.truncates:
        raise TritonizeError(f"--no-truncate does not apply to {task.name}: every context is read whole, in windows")
    if options.precision == "int8":
        if options.device != "cpu":
            raise TritonizeError("--precision int8 is for CPU deployments (onnxruntime's dynamic quantization)",
                                 hint="use --device cpu, or --precision fp16 on a GPU")
        if task.int8_figure is None:
            offered = ", ".join(t.name for t in tasks.TASKS.values() if t.int8_figure)
            raise TritonizeError(f"--precision int8 is offered for {offered}, where verification measures what it "
                                 f"keeps; not for {task.name}", hint="serve it in fp32")
    names = step_names(name)
    queue_size = (default_queue_size(options.queue_budget_ms, options.capacity_rps) if options.max_queue_size is None
                  else options.max_queue_size)

    def step(role: str, module: str, instances: int, kind: str) -> StepSpec:
        return StepSpec(
            name=names[role],
            module=module,
            max_batch_size=options.max_batch_size,
            max_queue_delay_us=options.max_queue_delay_us,
            instance_count=instances,
            kind=kind,  # type: ignore[arg-type]
            max_queue_size=queue_size,
        )

    return RepoSpec(
        name=name,
        model=model,
        description=task.describe(model.head),
        text_inputs=task.text_inputs,
        outputs=task.outputs(model.head),
        labels=task.labels(model.head),
        graph_outputs=task.graph_outputs(model.head),
        truncation=task.truncation_for(model.head),
        tokenizer_step=step("tokenizer", task.front_module, options.tokenizer_instances, "KIND_CPU"),
        model_step=step("model", "onnx_model", options.model_instances, "KIND_GPU" if options.device == "gpu" else "KIND_CPU"),
        buckets=normalise_buckets(options.buckets, model.max_length),
        device=options.device,  # type: ignore[arg-type]
        precision=options.precision,  # type: ignore[arg-type]
        tensorrt=TensorRTSpec("FP16" if options.precision == "fp16" else "FP32") if options.tensorrt else None,
        max_batch_size=options.max_batch_size,
        post_step=step("post", task.post_module, 1, "KIND_CPU") if task.post_module else None,
        token_extras=task.token_extras,
        post_reads_text=task.post_reads_text,
        post_parameters=task.post_parameters(model),
        orchestrated=task.orchestrates,
        front_parameters=task.front_parameters(model, names["model"], options.max_batch_size),
        max_request_bytes=options.max_request_bytes,
        truncate=options.truncate,
        version=options.version or FIRST_VERSION,
    )


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,  # a missing value is a generation error, not an empty string
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = lambda value: yaml.safe_dump(value, sort_keys=False).rstrip("\n")
    return env


def render(repo: RepoSpec, manifest: Manifest, report: VerificationReport) -> list[RenderedFile]:
    """Every text file of the repository, from templates/."""
    env = _environment()
    common = {
        "repo": repo,
        "local_config_name": LOCAL_CONFIG_NAME,
        "manifest_file": MANIFEST_FILE,
        "model_file": MODEL_FILE,
        "sample_body": tasks.of(repo.model.head).sample_body("hello"),
    }
    t, m, e = repo.tokenizer_name, repo.model_name, repo.name
    layout = [
        (f"{e}/{CONFIG_FILE}", "ensemble/config.pbtxt.j2", {}),
        (f"{t}/{CONFIG_FILE}", "tokenizer/config.pbtxt.j2", {"step": repo.tokenizer_step}),
        (f"{m}/{CONFIG_FILE}", "model/onnxruntime.pbtxt.j2", {"step": repo.model_step, "ragged": False}),
        (
            f"{m}/{LOCAL_CONFIG_DIR}/{LOCAL_CONFIG_NAME}.pbtxt",
            "model/python.pbtxt.j2",
            {"step": repo.model_step, "ragged": repo.local.ragged},
        ),
        (MANIFEST_FILE, "repository/tritonize.yaml.j2", {"options": manifest.to_dict()}),
        (VERIFICATION_FILE, "repository/verification.json.j2", {"report": report.to_dict()}),
        (README_FILE, "repository/README.md.j2", {}),
        (HEALTH_FILE, "repository/health.json.j2", {"health_json": health_check(repo)}),
        # Each version keeps the report of its own graph; the one at the top is the served version's.
        (f"{m}/{repo.version}/{VERIFICATION_FILE}", "repository/verification.json.j2", {"report": report.to_dict()}),
    ]
    if repo.post_step:
        layout.append((f"{repo.post_step.name}/{CONFIG_FILE}", "post/config.pbtxt.j2", {"step": repo.post_step}))
    if repo.labels:
        # Triton's classification extension reads labels next to the config that names them.
        layout += [(f"{d}/{LABELS_FILE}", "repository/labels.txt.j2", {}) for d in (m, e)]
    files = []
    for path, template, extra in layout:
        try:
            text = env.get_template(template).render(**common, **extra)
        except jinja2.TemplateError as exc:
            raise TritonizeError(f"template {template} failed to render: {exc}") from exc
        files.append(RenderedFile(path, text))
    return files


def health_check(repo: RepoSpec) -> str:
    """health.json: the one-row request the health check sends through the ensemble, and what it must answer."""
    request = json.loads(tasks.of(repo.model.head).sample_body())
    return json.dumps({"model": repo.name, "request": request, "outputs": [t.name for t in repo.outputs]},
                      indent=2, ensure_ascii=False)


def served_files(repo: RepoSpec) -> dict[str, Path]:
    """Each Python step's module as model.py, and the served modules it imports, copied byte for byte."""
    return {
        f"{step.name}/{repo.version}/{target}": source
        for step in repo.steps
        for target, source in serving.step_files(step.module, SERVED_ENTRY).items()
    }


def parse_config(text: str, origin: str = CONFIG_FILE) -> model_config_pb2.ModelConfig:
    """Parse into Triton's own ModelConfig schema; any unknown field or bad value is an error."""
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise TritonizeError(f"{origin} is not a valid Triton ModelConfig: {exc}") from exc
    return config


def config_as_triton_passes_it(path: Path) -> dict:
    """A config.pbtxt as the JSON dict Triton hands a Python model in args["model_config"]."""
    config = parse_config(path.read_text(), str(path))
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def validate(files: list[RenderedFile]) -> dict[str, model_config_pb2.ModelConfig]:
    """Schema-check every config, and that each names the model of its directory."""
    configs = {}
    for f in files:
        if not f.path.endswith(".pbtxt"):
            continue
        config = parse_config(f.text, f.path)
        model_dir = f.path.split("/")[0]
        if config.name != model_dir:
            raise TritonizeError(f"{f.path} names model {config.name!r} but lives in {model_dir}/")
        configs[f.path] = config
    return configs


def _owned(output: Path) -> bool:
    """True when `output` may be replaced: missing, empty (but dotfiles), or written by tritonize."""
    if not output.exists():
        return True
    if not output.is_dir():
        return False
    entries = [p for p in output.iterdir() if not p.name.startswith(".")]
    return not entries or (output / MANIFEST_FILE).is_file()


def check_output(output: Path, force: bool) -> None:
    """Refuse to replace a directory tritonize did not write, unless forced."""
    if not force and not _owned(output):
        raise TritonizeError(
            f"{output} exists and was not written by tritonize (no {MANIFEST_FILE})",
            hint="choose another --output, or pass --force to replace it",
        )


def staging_dir(output: Path) -> Path:
    """A temporary directory on the output's filesystem, so the final swap is a rename."""
    output.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{output.name}.tritonize-", dir=output.parent))


def _move_dotfiles(source: Path, target: Path) -> None:
    for hidden in source.iterdir():  # keep dotfiles such as .gitkeep
        if hidden.name.startswith("."):
            os.replace(hidden, target / hidden.name)


def _place(binaries: dict[str, Path], root: Path, staging: Path) -> None:
    """Each file to its repository-relative path under `root`: moved when this run made it in `staging`, else copied."""
    for rel, source in binaries.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if staging in Path(source).parents:  # made by this run: move, do not copy
            os.replace(source, target)
        else:
            shutil.copy2(source, target)


def replace_file(path: Path, text: str) -> None:
    """Write beside, then rename over: a server loading the model reads the old file or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def write(
    files: list[RenderedFile],
    binaries: dict[str, Path],
    output: Path,
    staging: Path,
    force: bool = False,
    version: int = FIRST_VERSION,
) -> Path:
    """Assemble the repository in `staging`, then swap it in place of `output`.

    `binaries` maps repository-relative paths to files to move in (ONNX graphs,
    tokenizer.json) or copy (served modules). A failure at any point leaves
    `output` as it was: if the final rename fails, the previous repository
    (moved aside inside `staging`) is put back before the error surfaces.
    """
    output = Path(output)
    check_output(output, force)
    validate(files)
    root = staging / "repository"
    root.mkdir()
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.text, encoding="utf-8")
    _place(binaries, root, staging)
    # Version directories must exist even where there is no file (the ensemble).
    for model_dir in {f.path.split("/")[0] for f in files if f.path.endswith(CONFIG_FILE)}:
        (root / model_dir / str(version)).mkdir(exist_ok=True)
    if not output.exists():
        os.replace(root, output)
        return output
    _move_dotfiles(output, root)
    retired = staging / "previous"
    os.replace(output, retired)
    try:
        os.replace(root, output)
    except BaseException:
        os.replace(retired, output)
        _move_dotfiles(root, output)
        raise
    return output


def versions(output: Path) -> list[int]:
    """The version folders of a repository, read from its ensemble's folder (every step has the same)."""
    current = find_manifest(output)
    folder = Path(output) / current.name if current else None
    if folder is None or not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.is_dir() and p.name.isdigit())


def joins(output: Path, options: GenerateOptions) -> Manifest | None:
    """The manifest of the repository a new version joins, or None where generate writes a whole repository.

    A version joins only above every version already there: a version folder a server may have loaded is
    never rewritten in place.
    """
    if options.version is None:
        return None
    current = find_manifest(output)
    if current is None:
        return None
    present = versions(output)
    if present and options.version <= present[-1]:
        raise TritonizeError(
            f"{output} already has version(s) {', '.join(map(str, present))}: version {options.version} would rewrite "
            "what a server may be serving",
            hint=f"pass --version {present[-1] + 1}",
        )
    if options.name and options.name != current.name:
        raise TritonizeError(f"{output} serves {current.name!r}; a new version keeps the name (got --name {options.name})")
    return current


def _comparable(config: model_config_pb2.ModelConfig) -> dict:
    """A config without what versions may change: the version policy and the ensemble's pinned versions."""
    copy = model_config_pb2.ModelConfig()
    copy.CopyFrom(config)
    copy.ClearField("version_policy")
    for step in copy.ensemble_scheduling.step:
        step.model_version = -1
    return json_format.MessageToDict(copy, preserving_proto_field_name=True)


def _first_difference(old: object, new: object, path: str = "") -> str:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if old.get(key) != new.get(key):
                return _first_difference(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new)):
            if a != b:
                return _first_difference(a, b, f"{path}[{i}]")
    return f"{path}: {json.dumps(old)[:80]} -> {json.dumps(new)[:80]}"


def check_joins(files: list[RenderedFile], output: Path) -> None:
    """A new version must fit the configs the repository's versions share (Triton keeps one config per model,
    not per version): the same steps, tensors, batching and parameters, and the same labels."""
    for f in files:
        target = Path(output) / f.path
        if f.path.endswith(".pbtxt"):
            if not target.is_file():
                raise TritonizeError(f"this version needs {f.path}, which {output} does not have",
                                     hint="generate it as a new repository (another --output or --name)")
            old, new = (_comparable(parse_config(t, f.path)) for t in (target.read_text(), f.text))
            if old != new:
                raise TritonizeError(
                    f"this version cannot join {output}: {f.path} differs in {_first_difference(old, new)}",
                    hint="versions of one repository share their configs; generate a new repository (another --output)",
                )
        elif f.path.endswith(LABELS_FILE) and (not target.is_file() or target.read_text() != f.text):
            raise TritonizeError(f"this version cannot join {output}: its labels differ from {f.path}",
                                 hint="generate a new repository (another --output)")


def add_version(files: list[RenderedFile], binaries: dict[str, Path], output: Path, staging: Path, version: int) -> Path:
    """Add version folders beside those of a repository, which a server may be serving.

    Order keeps every moment servable: each new version folder is assembled in `staging` and renamed in
    (no server loads it yet), then the step configs, the ensemble's config (pinning the new version) and
    last the manifest are replaced file by file.
    """
    output = Path(output)
    configs = validate(files)
    check_joins(files, output)
    root = staging / "version"
    _place(binaries, root, staging)
    models = sorted({f.path.split("/")[0] for f in files if f.path.endswith(CONFIG_FILE)})
    for model_dir in models:
        (root / model_dir / str(version)).mkdir(parents=True, exist_ok=True)
        os.replace(root / model_dir / str(version), output / model_dir / str(version))
    ensemble = next(path for path, config in configs.items() if config.platform == "ensemble")
    last = {ensemble: 1, MANIFEST_FILE: 2}
    for f in sorted(files, key=lambda f: last.get(f.path, 0)):
        target = output / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_file(target, f.text)
    return output


def manifest(options: GenerateOptions, repo: RepoSpec) -> Manifest:
    """The effective options (what `--config` accepts) plus what was decided from the model folder."""
    effective = dataclasses.replace(
        options,
        name=repo.name,
        task=repo.model.task,
        max_length=repo.model.max_length,
        buckets=list(repo.buckets),
        force=False,
    )
    return Manifest(effective, repo.model)


def reconfigure(repo_dir: Path, overrides: Overrides) -> RepoSpec:
    """Re-render only the configs of an existing repository with changed options (no re-export).

    Used by `tritonize tune`: batching, instance counts and buckets change;
    the ONNX graph, tokenizer and verification report stay as they are.
    """
    repo_dir = Path(repo_dir)
    current = read_manifest(repo_dir)
    options = overrides.apply(current.options)
    repo = plan(options, current.model, current.name)
    report_path = repo_dir / VERIFICATION_FILE
    report = VerificationReport.from_dict(json.loads(report_path.read_text())) if report_path.is_file() else VerificationReport.skipped_report()
    files = [f for f in render(repo, manifest(options, repo), report) if f.path.endswith(".pbtxt") or f.path == MANIFEST_FILE]
    validate(files)
    for f in files:
        replace_file(repo_dir / f.path, f.text)
    return repo
