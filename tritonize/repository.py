"""RepoSpec + artifacts -> rendered templates -> schema validation -> written atomically.

Nothing reaches the output directory until every config has parsed into
Triton's own `ModelConfig` protobuf; the new repository is assembled in a
temporary directory beside the output and swapped in by rename.
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
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from .errors import TritonizeError
from .paths import TEMPLATES_DIR
from .spec import LOCAL_CONFIG_NAME, GenerateOptions, ModelSpec, RepoSpec, StepSpec, normalise_buckets

MANIFEST = "tritonize.yaml"
VERIFICATION = "verification.json"
# Key of tritonize.yaml that records what was read from the model folder (not an option).
RESOLVED_KEY = "resolved_model"


@dataclass(frozen=True)
class RenderedFile:
    path: str  # relative to the repository root
    text: str


def plan(options: GenerateOptions, model: ModelSpec, name: str, pad_token_id: int) -> RepoSpec:
    """Decide names, batching and placement of the three Triton models."""
    for label, value in (
        ("--max-batch-size", options.max_batch_size),
        ("--tokenizer-instances", options.tokenizer_instances),
        ("--model-instances", options.model_instances),
    ):
        if value < 1:
            raise TritonizeError(f"{label} must be at least 1 (got {value})")
    if options.max_queue_delay_us < 0:
        raise TritonizeError(f"--max-queue-delay-us must be 0 or more (got {options.max_queue_delay_us})")
    if options.tensorrt and options.device != "gpu":
        raise TritonizeError("--tensorrt needs --device gpu", hint="TensorRT runs on NVIDIA GPUs only")
    if not name or not all(c.isalnum() or c in "_-." for c in name):
        raise TritonizeError(f"invalid model name {name!r}", hint="use letters, digits, '_', '-' or '.'")

    def step(suffix: str, instances: int, kind: str) -> StepSpec:
        return StepSpec(
            name=f"{name}{suffix}",
            max_batch_size=options.max_batch_size,
            max_queue_delay_us=options.max_queue_delay_us,
            instance_count=instances,
            kind=kind,
        )

    return RepoSpec(
        name=name,
        model=model,
        tokenizer_step=step("_tokenizer", options.tokenizer_instances, "KIND_CPU"),
        model_step=step("_model", options.model_instances, "KIND_GPU" if options.device == "gpu" else "KIND_CPU"),
        buckets=normalise_buckets(options.buckets, model.max_length),
        device=options.device,  # type: ignore[arg-type]
        precision=options.precision,  # type: ignore[arg-type]
        tensorrt=options.tensorrt,
        max_batch_size=options.max_batch_size,
        pad_token_id=pad_token_id,
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


def render(repo: RepoSpec, options: dict, report: dict, intra_op_threads: int = 0) -> list[RenderedFile]:
    """Every text file of the repository, from templates/."""
    env = _environment()
    common = {"repo": repo, "local_config_name": LOCAL_CONFIG_NAME}
    t, m, e = f"{repo.tokenizer_name}", f"{repo.model_name}", f"{repo.name}"
    plan_ = [
        (f"{e}/config.pbtxt", "ensemble/config.pbtxt.j2", {}),
        (f"{t}/config.pbtxt", "tokenizer/config.pbtxt.j2", {"step": repo.tokenizer_step}),
        (f"{t}/1/model.py", "tokenizer/model.py.j2", {}),
        (f"{m}/config.pbtxt", "model/onnxruntime.pbtxt.j2", {"step": repo.model_step, "ragged": False}),
        (
            f"{m}/configs/{LOCAL_CONFIG_NAME}.pbtxt",
            "model/python.pbtxt.j2",
            {
                "step": repo.model_step,
                "ragged": True,
                "intra_op_threads": intra_op_threads,
                "allow_spinning": 1,  # within a run only (see model.py)
            },
        ),
        (f"{m}/1/model.py", "model/model.py.j2", {}),
        (MANIFEST, "repository/tritonize.yaml.j2", {"options": options, "manifest_path": MANIFEST}),
        (VERIFICATION, "repository/verification.json.j2", {"report": report}),
        ("README.md", "repository/README.md.j2", {}),
    ]
    if repo.model.task == "classification":
        # Triton's classification extension reads labels next to the config that names them.
        plan_ += [(f"{d}/{repo.labels_file}", "repository/labels.txt.j2", {}) for d in (m, e)]
    files = []
    for path, template, extra in plan_:
        try:
            text = env.get_template(template).render(**common, **extra)
        except jinja2.TemplateError as exc:
            raise TritonizeError(f"template {template} failed to render: {exc}") from exc
        files.append(RenderedFile(path, text))
    return files


def parse_config(text: str, origin: str = "config.pbtxt") -> model_config_pb2.ModelConfig:
    """Parse into Triton's own ModelConfig schema; any unknown field or bad value is an error."""
    config = model_config_pb2.ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as exc:
        raise TritonizeError(f"{origin} is not a valid Triton ModelConfig: {exc}") from exc
    return config


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
    return not entries or (output / MANIFEST).is_file()


def check_output(output: Path, force: bool) -> None:
    """Refuse to replace a directory tritonize did not write, unless forced."""
    if not force and not _owned(output):
        raise TritonizeError(
            f"{output} exists and was not written by tritonize (no {MANIFEST})",
            hint="choose another --output, or pass --force to replace it",
        )


def staging_dir(output: Path) -> Path:
    """A temporary directory on the output's filesystem, so the final swap is a rename."""
    output.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{output.name}.tritonize-", dir=output.parent))


def write(
    files: list[RenderedFile],
    binaries: dict[str, Path],
    output: Path,
    staging: Path,
    force: bool = False,
) -> Path:
    """Assemble the repository in `staging`, then swap it in place of `output`.

    `binaries` maps repository-relative paths to files to move in (ONNX graphs,
    tokenizer.json). A failure at any point leaves `output` as it was.
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
    for rel, source in binaries.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if staging in Path(source).parents:  # made by this run: move, do not copy
            os.replace(source, target)
        else:
            shutil.copy2(source, target)
    # Version directories must exist even where there is no file (the ensemble).
    for config_path in {f.path.split("/")[0] for f in files if f.path.endswith("config.pbtxt")}:
        (root / config_path / "1").mkdir(exist_ok=True)
    if output.exists():
        for hidden in output.iterdir():  # keep dotfiles such as .gitkeep
            if hidden.name.startswith("."):
                os.replace(hidden, root / hidden.name)
        retired = staging / "previous"
        os.replace(output, retired)
    os.replace(root, output)
    return output


def manifest(options: GenerateOptions, repo: RepoSpec) -> dict:
    """The effective options (what `--config` accepts) plus what was decided from the model folder."""
    effective = options.to_dict()
    effective.update(
        name=repo.name,
        task=repo.model.task,
        max_length=repo.model.max_length,
        buckets=list(repo.buckets),
        force=False,
    )
    resolved = dataclasses.asdict(repo.model)
    resolved["pad_token_id"] = repo.pad_token_id
    effective[RESOLVED_KEY] = resolved
    return effective


def load_manifest(repo_dir: Path) -> dict:
    path = Path(repo_dir) / MANIFEST
    if not path.is_file():
        raise TritonizeError(f"{repo_dir} has no {MANIFEST}", hint="generate the repository with tritonize first")
    return yaml.safe_load(path.read_text()) or {}


def reconfigure(repo_dir: Path, changes: dict) -> RepoSpec:
    """Re-render only the configs of an existing repository with changed options (no re-export).

    Used by `tritonize tune`: batching, instance counts and buckets change;
    the ONNX graph, tokenizer and verification report stay as they are.
    """
    repo_dir = Path(repo_dir)
    data = load_manifest(repo_dir)
    resolved = dict(data.pop(RESOLVED_KEY))
    pad_id = int(resolved.pop("pad_token_id", 0))
    for key in ("input_names", "labels"):
        resolved[key] = tuple(resolved.get(key) or ())
    model = ModelSpec(**resolved)
    unknown = set(changes) - set(GenerateOptions.field_names())
    if unknown:
        raise TritonizeError(f"unknown option(s): {', '.join(sorted(unknown))}")
    options = GenerateOptions(**{k: v for k, v in data.items() if k in GenerateOptions.field_names()})
    options = dataclasses.replace(options, **changes)
    repo = plan(options, model, options.name or data["name"], pad_id)
    report_path = repo_dir / VERIFICATION
    report = json.loads(report_path.read_text()) if report_path.is_file() else {}
    files = [f for f in render(repo, manifest(options, repo), report) if f.path.endswith(".pbtxt") or f.path == MANIFEST]
    validate(files)
    for f in files:
        target = repo_dir / f.path
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(f.text, encoding="utf-8")
        os.replace(tmp, target)
    return repo
