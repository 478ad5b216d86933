"""RepoSpec -> text: templates/ rendered, and every config parsed into Triton's own `ModelConfig` protobuf.

Templates hold the layout and RepoSpec the decisions; a config that does not parse, or names another model
than its folder's, is a generation error before anything is written.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import jinja2
import yaml
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from .. import serving
from ..errors import TritonizeError
from ..paths import TEMPLATES_DIR
from ..serving.statistics import STATISTICS_FILE
from ..serving.statistics_step import IDLE
from ..spec import (
    CONFIG_FILE,
    CONFIGS_DIR,
    FIRST,
    LABELS_FILE,
    MODEL,
    MANIFEST_FILE,
    MODEL_FILE,
    POST,
    QUANTIZATION_FILE,
    SERVED_ENTRY,
    VERIFICATION_FILE,
    WARMUP_TEXT_FILE,
    RepoSpec,
    StepSpec,
)
from ..verify import VerificationReport

STATISTICS_MODULE = "statistics.py"  # the served module that counts, beside which the task's statistics go


@dataclass(frozen=True)
class RenderedFile:
    path: str  # relative to the repository root
    text: str


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=jinja2.StrictUndefined,  # a missing value is a generation error, not an empty string
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["to_yaml"] = lambda value: yaml.safe_dump(value, sort_keys=False).rstrip("\n")
    return env


def render_layout(layout: list[tuple[str, str, dict]], common: dict) -> list[RenderedFile]:
    env = _environment()
    files = []
    for path, template, extra in layout:
        try:
            text = env.get_template(template).render(**common, **extra)
        except jinja2.TemplateError as exc:
            raise TritonizeError(f"template {template} failed to render: {exc}") from exc
        files.append(RenderedFile(path, text))
    return files


def model_files(repo: RepoSpec, report: VerificationReport, calibration: dict | None = None,
                statistics: dict | None = None) -> list[RenderedFile]:
    """The configs, labels, version report, (where the task calibrates) version ranges and the baseline of the
    output statistics of one model's folders: the ensemble's, then each step's as its role lays it out."""
    fused = f"{CONFIGS_DIR}/{repo.fused_config_name}.pbtxt"
    common = {"repo": repo, "fused_config_name": repo.fused_config_name, "model_file": MODEL_FILE,
              "manifest_file": MANIFEST_FILE, "statistics_file": STATISTICS_FILE, "warmup_text": WARMUP_TEXT_FILE}
    m, e = repo.model_name, repo.name
    layout = [(f"{e}/{CONFIG_FILE}", "ensemble/config.pbtxt.j2", {"steps": repo.ensemble_steps, "fused_note": False})]
    if repo.pipeline.has_fused_variant:
        layout.append((f"{e}/{fused}", "ensemble/config.pbtxt.j2",
                       {"steps": repo.fused_ensemble_steps, "fused_note": repo.pipeline.fuses}))
    for step in repo.steps:
        layout += _step_layout(repo, step, fused)
    # Each version keeps the report of its own graph; the one in the index is the served version's.
    layout.append((f"{m}/{repo.version}/{VERIFICATION_FILE}", "repository/verification.json.j2", {"report": report.to_dict()}))
    if calibration is not None:  # the ranges of this version's graph, beside its report
        layout.append((f"{m}/{repo.version}/{QUANTIZATION_FILE}", "repository/quantization.json.j2",
                       {"calibration": calibration}))
    if statistics is not None:  # the baseline of this version's answers, beside each step that counts them
        layout += [(f"{step.name}/{repo.version}/{STATISTICS_FILE}", "repository/statistics.json.j2",
                    {"statistics": statistics}) for step in repo.steps]
    if repo.labels:
        # Triton's classification extension reads labels next to the config that names them.
        layout += [(f"{d}/{LABELS_FILE}", "repository/labels.txt.j2", {}) for d in (m, e)]
    return render_layout(layout, common)


def _step_layout(repo: RepoSpec, step: StepSpec, fused: str) -> list[tuple[str, str, dict]]:
    """One step's configs: the model step's production and fused configs; any other step's config from
    templates/<role>/, and where it idles in the fused variant (`Pipeline.idles_in_fused`), a copy in one instance."""
    if step.role == MODEL:
        return [(f"{step.name}/{CONFIG_FILE}", "model/onnxruntime.pbtxt.j2", {"step": step, "ragged": False})] + (
            [(f"{step.name}/{fused}", "model/python.pbtxt.j2", {"step": repo.fused_model_step})]
            if repo.pipeline.has_fused_variant else [])
    template = "first/onnxruntime.pbtxt.j2" if repo.pipeline.runs_graph(step.role) else f"{step.role.key}/config.pbtxt.j2"
    layout = [(f"{step.name}/{CONFIG_FILE}", template, {"step": step, "idle": False, "parameters": _parameters(repo, step, False)})]
    if repo.pipeline.has_fused_variant and repo.pipeline.idles_in_fused(step.role):
        layout.append((f"{step.name}/{fused}", template, {"step": dataclasses.replace(step, instance_count=1), "idle": True,
                                                          "parameters": _parameters(repo, step, True)}))
    return layout


def _parameters(repo: RepoSpec, step: StepSpec, idle: bool) -> dict[str, str]:
    """What a Python step reads from its config's parameters; an idle statistics step is told so (IDLE)."""
    if step.role == FIRST:
        return repo.first_step_parameters | ({} if idle else repo.admission_parameters)
    if step.role == POST:
        return repo.post_parameters
    return {IDLE: "1"} if idle else {}


def served_files(repo: RepoSpec) -> dict[str, Path]:
    """Each Python step's module as model.py, and the served modules it imports, copied byte for byte; beside
    serving/statistics.py, the task's module that declares its statistics (statistics.py imports it by name)."""
    files = {}
    for step in repo.steps:
        if repo.pipeline.runs_python(step.role):
            found = serving.step_files(step.module, SERVED_ENTRY)
            if repo.statistics_module and STATISTICS_MODULE in found:
                found |= serving.step_files(repo.statistics_module, f"{repo.statistics_module}.py")
            files |= {f"{step.name}/{repo.version}/{target}": source for target, source in found.items()}
    return files


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
