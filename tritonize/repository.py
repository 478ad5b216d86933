"""RepoSpec + artifacts -> rendered layout + copied served modules -> schema validation -> written atomically.

Nothing reaches the output directory until every config has parsed into
Triton's own `ModelConfig` protobuf; the new repository is assembled in a
temporary directory beside the output and swapped in by rename, and the
previous repository is put back if the swap fails.

A repository may serve several models, each in its own folders (`spec.step_names`). What is about the
repository as a whole lives in its index files at the top: tritonize.yaml (every model's options),
verification.json (every model's report), health.json (every model's check) and README.md. With one
model each holds that model's entry alone, as repositories always have; with several, a list of entries.
Adding a model (`add_model`) moves its folders in and replaces the index files only.
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
from .manifest import Manifest, choose, find_manifests, load_entries, read_manifest
from .paths import TEMPLATES_DIR
from .spec import (
    CONFIG_FILE,
    CONTAINER_MODEL_INSTANCES,
    LABELS_FILE,
    LOCAL_CONFIG_DIR,
    LOCAL_CONFIG_NAME,
    LOCAL_ONE_STEP_INSTANCES,
    MANIFEST_FILE,
    MODEL_FILE,
    MODELS_KEY,
    README_FILE,
    SERVED_ENTRY,
    VERIFICATION_FILE,
    FIRST_VERSION,
    GenerateOptions,
    LocalRuntimeSpec,
    ModelSpec,
    Overrides,
    RepoSpec,
    StepSpec,
    TensorRTSpec,
    default_queue_size,
    normalise_buckets,
    repo_paths,
    step_names,
)
from .serving import health
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
        if value is not None and value < 1:
            raise TritonizeError(f"{label} must be at least 1 (got {value})")
    for label, value in (("--max-queue-delay-us", options.max_queue_delay_us), ("--max-queue-size", options.max_queue_size),
                         ("--max-request-bytes", options.max_request_bytes), ("--gather-us", options.gather_us)):
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
    buckets = normalise_buckets(options.buckets, model.max_length)

    def step(role: str, module: str, instances: int, kind: str) -> StepSpec:
        return StepSpec(
            name=names[role],
            module=module,
            max_batch_size=options.max_batch_size,
            max_queue_delay_us=options.max_queue_delay_us,
            instance_count=instances,
            kind=kind,  # type: ignore[arg-type]
            max_queue_size=queue_size,
            max_queue_wait_us=1000 * options.queue_budget_ms if queue_size else 0,
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
        model_step=step("model", "onnx_model" if task.orchestrates else "one_step",
                        options.model_instances or CONTAINER_MODEL_INSTANCES, "KIND_GPU" if options.device == "gpu" else "KIND_CPU"),
        local_model_instances=options.model_instances or LOCAL_ONE_STEP_INSTANCES,
        local=LocalRuntimeSpec(gather_us=options.gather_us),
        buckets=buckets,
        device=options.device,  # type: ignore[arg-type]
        precision=options.precision,  # type: ignore[arg-type]
        tensorrt=(TensorRTSpec.of(options.precision, model.input_names, buckets, options.max_batch_size)
                  if options.tensorrt else None),
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


@dataclass(frozen=True)
class IndexEntry:
    """One model's part of the repository's index files, as written: its tritonize.yaml entry, its
    verification report and its health check; and its RepoSpec, which the README describes."""

    repo: RepoSpec
    manifest: dict
    report: dict
    check: dict

    @property
    def name(self) -> str:
        return self.repo.name


# The index files, in the order they are replaced: the manifest last, since it says which models there are.
INDEX_FILES = (README_FILE, HEALTH_FILE, VERIFICATION_FILE, MANIFEST_FILE)


def index_entry(repo: RepoSpec, manifest: Manifest, report: VerificationReport) -> IndexEntry:
    return IndexEntry(repo, manifest.to_dict(), report.to_dict(), health_check(repo))


def render(repo: RepoSpec, manifest: Manifest, report: VerificationReport,
           index: list[IndexEntry] | tuple[IndexEntry, ...] = ()) -> list[RenderedFile]:
    """Every text file of the model's folders, from templates/, and the index files over `index` (the other
    models of the repository, as read by `read_index`) with this model's entry in its place, or last."""
    entry = index_entry(repo, manifest, report)
    entries = [entry if e.name == repo.name else e for e in index]
    if repo.name not in {e.name for e in index}:
        entries.append(entry)
    return model_files(repo, report) + index_files(entries)


def _render(layout: list[tuple[str, str, dict]], common: dict) -> list[RenderedFile]:
    env = _environment()
    files = []
    for path, template, extra in layout:
        try:
            text = env.get_template(template).render(**common, **extra)
        except jinja2.TemplateError as exc:
            raise TritonizeError(f"template {template} failed to render: {exc}") from exc
        files.append(RenderedFile(path, text))
    return files


def model_files(repo: RepoSpec, report: VerificationReport) -> list[RenderedFile]:
    """The configs, labels and version report of one model's folders."""
    common = {"repo": repo, "local_config_name": LOCAL_CONFIG_NAME, "model_file": MODEL_FILE, "manifest_file": MANIFEST_FILE}
    t, m, e = repo.tokenizer_name, repo.model_name, repo.name
    layout = [
        (f"{e}/{CONFIG_FILE}", "ensemble/config.pbtxt.j2", {"steps": repo.ensemble_steps, "local": False}),
        (f"{e}/{LOCAL_CONFIG_DIR}/{LOCAL_CONFIG_NAME}.pbtxt", "ensemble/config.pbtxt.j2",
         {"steps": repo.local_ensemble_steps, "local": True}),
        (f"{t}/{CONFIG_FILE}", "tokenizer/config.pbtxt.j2", {"step": repo.tokenizer_step, "idle": False}),
        *([(f"{t}/{LOCAL_CONFIG_DIR}/{LOCAL_CONFIG_NAME}.pbtxt", "tokenizer/config.pbtxt.j2",
            {"step": dataclasses.replace(repo.tokenizer_step, instance_count=1), "idle": True})] if repo.one_step else []),
        (f"{m}/{CONFIG_FILE}", "model/onnxruntime.pbtxt.j2", {"step": repo.model_step, "ragged": False}),
        (f"{m}/{LOCAL_CONFIG_DIR}/{LOCAL_CONFIG_NAME}.pbtxt", "model/python.pbtxt.j2", {"step": repo.local_model_step}),
        # Each version keeps the report of its own graph; the one in the index is the served version's.
        (f"{m}/{repo.version}/{VERIFICATION_FILE}", "repository/verification.json.j2", {"report": report.to_dict()}),
    ]
    if repo.post_step:
        layout.append((f"{repo.post_step.name}/{CONFIG_FILE}", "post/config.pbtxt.j2", {"step": repo.post_step}))
    if repo.labels:
        # Triton's classification extension reads labels next to the config that names them.
        layout += [(f"{d}/{LABELS_FILE}", "repository/labels.txt.j2", {}) for d in (m, e)]
    return _render(layout, common)


def index_files(entries: list[IndexEntry]) -> list[RenderedFile]:
    """tritonize.yaml, verification.json, README.md and health.json: one model's entries alone, several listed."""
    several = len(entries) > 1
    options = {MODELS_KEY: [e.manifest for e in entries]} if several else entries[0].manifest
    report = {MODELS_KEY: {e.name: e.report for e in entries}} if several else entries[0].report
    checks = json.dumps(health.document([e.check for e in entries]), indent=2, ensure_ascii=False)
    models = [{"repo": e.repo, "sample_body": tasks.of(e.repo.model.head).sample_body("hello")} for e in entries]
    layout = [
        (MANIFEST_FILE, "repository/tritonize.yaml.j2", {"options": options, "names": [e.name for e in entries]}),
        (VERIFICATION_FILE, "repository/verification.json.j2", {"report": report}),
        (README_FILE, "repository/README.md.j2", {"models": models}),
        (HEALTH_FILE, "repository/health.json.j2", {"health_json": checks}),
    ]
    return _render(layout, {"manifest_file": MANIFEST_FILE, "local_config_name": LOCAL_CONFIG_NAME})


def health_check(repo: RepoSpec) -> dict:
    """One model's health check: the one-row request sent through its ensemble, and what it must answer."""
    request = json.loads(tasks.of(repo.model.head).sample_body())
    return {"model": repo.name, "request": request, "outputs": [t.name for t in repo.outputs]}


def _read_json(path: Path) -> dict:
    """A JSON object from a file; {} where it is missing or unreadable (the index is then rebuilt from the models)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_index(output: Path) -> list[IndexEntry]:
    """Every model's entries in an existing repository's index files, as written: what adding a model or a
    version keeps. A report or check missing from the index is taken from the model's folder or rebuilt."""
    output = Path(output)
    raw = load_entries(output) or []
    manifests = [Manifest.from_dict(data, str(output / MANIFEST_FILE)) for data in raw]
    stored = _read_json(output / VERIFICATION_FILE)
    if MODELS_KEY in stored:
        reports = dict(stored[MODELS_KEY])
    else:  # a repository of one model: the file is its report
        reports = {manifests[0].name: stored} if stored and len(manifests) == 1 else {}
    checks = {c.get("model"): c for c in health.checks_of(_read_json(output / HEALTH_FILE)) if isinstance(c, dict)}
    entries = []
    for data, current in zip(raw, manifests):
        repo = plan(current.options, current.model, current.name)
        report = reports.get(current.name) or _read_json(repo_paths(output, current.name)["model"] / str(repo.version)
                                                         / VERIFICATION_FILE) or VerificationReport.skipped_report().to_dict()
        entries.append(IndexEntry(repo, data, report, checks.get(current.name) or health_check(repo)))
    return entries


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


def _held(output: Path) -> list[str]:
    """The names of the models a repository holds, as its tritonize.yaml lists them ([] where it cannot be read)."""
    try:
        return [str(entry.get("name")) for entry in load_entries(output) or []]
    except TritonizeError:
        return []


def check_output(output: Path, force: bool) -> None:
    """Refuse to replace a directory tritonize did not write, or a repository of several models, unless forced."""
    if force:
        return
    if not _owned(output):
        raise TritonizeError(
            f"{output} exists and was not written by tritonize (no {MANIFEST_FILE})",
            hint="choose another --output, or pass --force to replace it",
        )
    held = _held(output)
    if len(held) > 1:
        raise TritonizeError(
            f"{output} holds {len(held)} models ({', '.join(held)}): writing a repository there would remove them",
            hint="--add puts a model beside them; --force replaces the repository; or choose another --output",
        )


def _is_empty(output: Path) -> bool:
    return not output.exists() or (output.is_dir() and not any(not p.name.startswith(".") for p in output.iterdir()))


def check_add(output: Path, repo: RepoSpec) -> list[IndexEntry]:
    """The index of the repository `repo` is added to, refused in one line where it cannot sit beside what is
    there; [] where `output` is missing or empty (the model starts a repository)."""
    output = Path(output)
    if _is_empty(output):
        return []
    if not _owned(output):
        raise TritonizeError(f"{output} exists and was not written by tritonize (no {MANIFEST_FILE}): --add only adds "
                             "to a tritonize repository", hint="choose another --output")
    index = read_index(output)
    names = [e.name for e in index]
    if repo.name in names:
        raise TritonizeError(f"{output} already holds a model named {repo.name!r} (models: {', '.join(names)})",
                             hint="choose another --name; for a new version of it, pass --version N instead of --add")
    folders = [repo.name, *(step.name for step in repo.steps)]
    taken = [f for f in folders if (output / f).exists()]
    if taken:
        raise TritonizeError(f"{output} already has a folder {taken[0]}/, which model {repo.name!r} needs for its "
                             f"steps ({', '.join(folders)})", hint="choose another --name")
    return index


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


def replace_file(path: Path, text: str | bytes) -> None:
    """Write beside, then rename over: a server loading the model reads the old file or the new one, never half."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _assemble(files: list[RenderedFile], binaries: dict[str, Path], root: Path, staging: Path, version: int) -> Path:
    """The rendered files and the binaries under `root`, and every model's version folder (the ensemble's has
    no file, but must exist)."""
    root.mkdir(parents=True, exist_ok=True)
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.text, encoding="utf-8")
    _place(binaries, root, staging)
    for model_dir in {f.path.split("/")[0] for f in files if f.path.endswith(CONFIG_FILE)}:
        (root / model_dir / str(version)).mkdir(exist_ok=True)
    return root


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
    root = _assemble(files, binaries, staging / "repository", staging, version)
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


def add_model(files: list[RenderedFile], binaries: dict[str, Path], output: Path, staging: Path,
              version: int = FIRST_VERSION) -> Path:
    """Add one model's folders beside the models of a repository, which a server may be serving.

    Nothing the repository holds changes but its index files: the model's folders are assembled in
    `staging` and renamed in (none of them exists: `check_add`), then the index files are replaced one by
    one, the manifest last. A failure at any point removes the folders moved in and puts every index file
    back as it was, byte for byte.
    """
    output = Path(output)
    validate(files)
    root = _assemble([f for f in files if f.path not in INDEX_FILES], binaries, staging / "model", staging, version)
    folders = sorted(p.name for p in root.iterdir())
    taken = [f for f in folders if (output / f).exists()]
    if taken:
        raise TritonizeError(f"{output} already has a folder {taken[0]}/", hint="choose another --name")
    index = sorted((f for f in files if f.path in INDEX_FILES), key=lambda f: INDEX_FILES.index(f.path))
    before = {f.path: (output / f.path).read_bytes() if (output / f.path).is_file() else None for f in index}
    moved: list[str] = []
    try:
        for folder in folders:
            os.replace(root / folder, output / folder)
            moved.append(folder)
        for f in index:
            replace_file(output / f.path, f.text)
    except BaseException:
        for rel, data in before.items():
            if data is None:
                (output / rel).unlink(missing_ok=True)
            else:
                replace_file(output / rel, data)
        for folder in moved:
            shutil.rmtree(output / folder, ignore_errors=True)
        raise
    return output


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
        add=False,
    )
    return Manifest(effective, repo.model)


def reconfigure(repo_dir: Path, overrides: Overrides, name: str | None = None) -> RepoSpec:
    """Re-render only the configs of one model of an existing repository (the only one, or `name`) with
    changed options (no re-export), and its entry of the manifest.

    Used by `tritonize tune`: batching, instance counts and buckets change;
    the ONNX graph, tokenizer and verification report stay as they are.
    """
    repo_dir = Path(repo_dir)
    current = read_manifest(repo_dir, name)
    index = read_index(repo_dir)
    options = overrides.apply(current.options)
    repo = plan(options, current.model, current.name)
    # Only the configs and the manifest are written: the report stays as verification wrote it.
    files = [f for f in render(repo, manifest(options, repo), VerificationReport.skipped_report(), index)
             if f.path.endswith(".pbtxt") or f.path == MANIFEST_FILE]
    validate(files)
    for f in files:
        replace_file(repo_dir / f.path, f.text)
    return repo
