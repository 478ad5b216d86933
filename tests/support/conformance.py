"""The conformance kit: what every registered task must hold, checked on a folder it serves without exporting or
serving anything. A task package written anywhere (registered by `tasks.register` or its entry point) runs the
same checks as the built-in ones:

- planning: its folder becomes a spec, and the build side's outputs are the contract's, in order;
- configs: every config of both variants renders and parses into Triton's ModelConfig, naming its directory, and
  each ensemble lists the pipeline's steps;
- served modules: each Python step's module, and the modules it imports, resolve to files, and the module holds
  the class its role runs;
- statistics: what its contract's statistics module declares is counted, has a panel in the outputs dashboard and,
  for a histogram, a drift rule;
- a request: the API's first route of the task answers the task's own sample body with 200, through a stub of
  Triton that answers each requested output in its declared shape and type.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from support import REPO_ROOT
from tritonize import serving, tasks
from tritonize.repository import planning, rendering
from tritonize.repository.index import manifest
from tritonize.source import read_model
from tritonize.spec import CONFIG_FILE, CONFIGS_DIR, RepoSpec
from tritonize.spec.options import GenerateOptions
from tritonize.verify import VerificationReport

NAME = "kit"  # the model's name in every check
# A tiny folder each built-in task serves: the zoo's, and for multi-vector and image-text their builders' layouts.
FOLDER_OF_TASK = {"embedding": "bert-st-mean", "sparse-embedding": "bert-splade", "classification": "bert-seq-cls",
                  "rerank": "bert-cross-encoder", "token-classification": "bert-token-cls",
                  "question-answering": "bert-qa", "multi-vector": "pylate", "image-text": "clip"}


def build_folder(task: str, entry: str, root: Path) -> Path:
    """The tiny folder `entry` of the task, built under root."""
    from support import model_zoo

    builders = {"multi-vector": lambda: model_zoo.build_multi_vector(root / entry, entry),
                "image-text": lambda: model_zoo.build_image_text(root / entry, entry)}
    return builders.get(task, lambda: model_zoo.build(entry, root))()
NUMPY = {"TYPE_FP32": np.float32, "TYPE_FP16": np.float16, "TYPE_INT64": np.int64, "TYPE_INT32": np.int32,
         "TYPE_BOOL": np.bool_}


@dataclass(frozen=True)
class Planned:
    task: str
    spec: RepoSpec
    options: GenerateOptions


def plan(task: str, folder: Path, output: Path) -> Planned:
    """The task's spec of the folder, as `generate --task TASK` plans it (its Python tokenizer step)."""
    options = GenerateOptions(model=str(folder), name=NAME, output=str(output), task=task, tokenizer="python")
    spec = planning.plan(options, read_model(options), NAME)
    return Planned(task, spec, options)


def outputs_agree(p: Planned) -> None:
    contract = tasks.contract_named(p.task)
    assert tasks.contract_of(p.spec.model.head) is contract, f"{p.task}: its head reads as another task's"
    built = tuple(t.name for t in p.spec.outputs)
    assert built == tuple(contract.output_names), f"{p.task}: builds {built}, its contract reads {contract.output_names}"
    answered = tuple(t.name for t in p.spec.ensemble_outputs)[:len(built)]
    assert answered == built, f"{p.task}: the ensemble answers {answered} first, not {built}"


def configs_parse(p: Planned) -> dict:
    """Every config, each ensemble's steps against the pipeline's: the parsed configs by path."""
    configs = rendering.validate(rendering.model_files(p.spec, VerificationReport.skipped_report()))
    spec = p.spec
    variants = [(f"{spec.name}/{CONFIG_FILE}", spec.ensemble_steps)]
    if spec.pipeline.has_fused_variant:
        variants.append((f"{spec.name}/{CONFIGS_DIR}/{spec.fused_config_name}.pbtxt", spec.fused_ensemble_steps))
    for path, steps in variants:
        assert path in configs, f"{p.task}: no {path}"
        listed = [(s.model_name, dict(s.input_map), dict(s.output_map)) for s in configs[path].ensemble_scheduling.step]
        assert listed == [(s.model_name, s.input_map, s.output_map) for s in steps], f"{p.task}: {path}"
    return configs


def served_modules_resolve(p: Planned) -> dict[str, Path]:
    files = rendering.served_files(p.spec)
    missing = [target for target, source in files.items() if not Path(source).is_file()]
    assert not missing, f"{p.task}: no file for {missing}"
    for step in p.spec.steps:
        if p.spec.pipeline.runs_python(step.role) and step.role.key in p.spec.pipeline.served_classes:
            module = importlib.import_module(f"{serving.__name__}.{step.module}")
            wanted = p.spec.pipeline.served_classes[step.role.key]
            assert hasattr(module, wanted), f"{p.task}: {module.__name__} has no {wanted}"
    return files


def statistics_published(p: Planned) -> list[str]:
    """The task's statistics by name, each with its dashboard panel, and each histogram with its drift rule."""
    from tritonize.runtime import dashboards, monitoring
    from tritonize.serving.statistics import declared

    module = tasks.contract_named(p.task).statistics_module
    if module is None:
        return []
    own = declared((module,))
    unknown = sorted(set(own) - set(tasks.statistics()))
    assert not unknown, f"{p.task}: the registry's statistics leave out {unknown}"
    board = dashboards.written((REPO_ROOT / dashboards.OUTPUTS_DASHBOARD).read_text())
    rules = monitoring.render_rules("the conformance kit")
    for name, statistic in own.items():
        assert name in board, f"{p.task}: no dashboard panel counts {name}"
        if statistic.histogram:
            assert name in rules, f"{p.task}: no drift rule watches {name}"
    return sorted(own)


def stub_answer(spec: RepoSpec, outputs, rows: int) -> dict[str, np.ndarray]:
    """Each asked output in its declared type, [rows, *dims], variable dims as 2: zeros, and for strings an empty
    JSON list."""
    declared = {t.name: t for t in spec.ensemble_outputs}
    answer = {}
    for name in outputs:
        tensor = declared[name]
        shape = (rows, *(2 if d < 0 else d for d in tensor.dims))
        if tensor.triton_type == "TYPE_STRING":
            answer[name] = np.full(shape, b"[]", dtype=object)
        else:
            answer[name] = np.zeros(shape, NUMPY[tensor.triton_type])
    return answer


def route_answers(p: Planned, repository: Path) -> tuple[str, int]:
    """The task's first route, with its own sample body, through the API over a stub of Triton: (route, status)."""
    from starlette.testclient import TestClient

    from tritonize.api.app import create_app
    from tritonize.api.catalog import Catalog, ServedModel
    from tritonize.api.routes import routers
    from tritonize.api.state import ApiSettings
    from tritonize.api.task_routes import task_routes

    served = ServedModel(manifest(p.options, p.spec), repository)
    routes = next((r for r in task_routes() if r.contract is served.contract), None)
    assert routes is not None, f"{p.task}: declares no routes"
    path, body = routes.api_sample(NAME)
    guard = create_app(ApiSettings(repository=repository, grpc_url="127.0.0.1:1"), Catalog((served,)))
    state = guard.state

    asked = []

    async def infer(model, inputs, outputs, ensemble=None, parameters=None):
        asked.append((model.name, tuple(outputs)))
        return stub_answer(p.spec, outputs, len(next(iter(inputs.values()))))

    state.backend.infer = infer  # Triton, answering every request at once
    assert any(r.path == path for router in routers() for r in router.routes), f"{p.task}: {path} is not served"
    with TestClient(guard) as client:
        answer = client.post(path, json=body)
    assert answer.status_code == 200, f"{p.task}: {path} answered {answer.status_code}: {answer.text[:300]}"
    assert asked and all(name == NAME for name, _ in asked), f"{p.task}: {path} answered without asking {NAME}"
    contract_outputs = set(tasks.contract_named(p.task).output_names)
    assert contract_outputs & set(asked[0][1]), f"{p.task}: {path} asked {asked[0][1]}, none of its contract's"
    answer.json()  # a JSON body
    return path, answer.status_code
