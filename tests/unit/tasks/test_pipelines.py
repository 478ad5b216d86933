"""Each task's pipeline, as the task declares it, wired on a real folder of that task: every tensor a step takes is
one the ensemble receives or an earlier step returns, in both variants, and the rendered ensemble says the same.

The folders are the zoo's tiny models (real tokenizers and configs); planning reads them without loading weights,
but for a late-interaction folder, whose head its library reads.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.conformance import FOLDER_OF_TASK, build_folder
from tritonize import tasks
from tritonize.repository import planning, rendering
from tritonize.source import read_model
from tritonize.spec import (
    CONFIG_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    ROLES,
    EnsembleStep,
    Orchestrated,
    PrepareModel,
    RepoSpec,
    TokenizeModelPost,
)
from tritonize.spec.options import GenerateOptions


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> dict[str, RepoSpec]:
    root = tmp_path_factory.mktemp("pipelines")
    out = {}
    for task, entry in FOLDER_OF_TASK.items():
        folder = build_folder(task, entry, root)
        options = GenerateOptions(model=str(folder), name=entry.replace("-", "_"), output=str(root / "repo"),
                                  tokenizer="python")
        out[task] = planning.plan(options, read_model(options), options.name)
    return out


@pytest.mark.parametrize("task", sorted(FOLDER_OF_TASK))
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_the_graph_layout_is_wired_where_planning_allows_it_and_refused_in_one_line_elsewhere(
        specs, task: str, device: str) -> None:
    """The default asks for the tokenizer in graphs: tasks of one text a row, tokenized and then the graph alone,
    get it (a texts step and the tokenizing model step on a CPU, a tokenizer step on a GPU), every tensor wired;
    every other task keeps its Python step, and planning says why in one line."""
    python = specs[task]
    options = GenerateOptions(model=python.model.source, name=python.name, device=device, tokenizer="graph")
    refusal = planning.graph_refusal(options, python.model)
    spec = planning.plan(options, python.model, python.name)
    if task in ("embedding", "classification"):
        assert refusal is None and spec.pipeline.graph_tokenizes and not spec.pipeline.has_fused_variant
        assert wiring_errors(spec, spec.pipeline.ensemble_steps(spec)) == []
        assert [r.key for r in spec.pipeline.roles] == ["first", "model"] and spec.statistics_step is None
    else:
        assert refusal is not None and "\n" not in str(refusal)
        assert spec.pipeline is python.pipeline


def test_every_task_is_planned_here() -> None:
    assert set(FOLDER_OF_TASK) == set(tasks.NAMES)


@pytest.mark.parametrize("task", sorted(FOLDER_OF_TASK))
def test_the_build_side_returns_what_the_read_side_reads(specs, task: str) -> None:
    """A task's build side (`Ensemble.outputs`) and its read side (`contract.output_names`) name the same outputs, in
    order, and the ensemble returns them first: the clients and the API read what the repository answers."""
    spec = specs[task]
    contract = tasks.contract_of(spec.model.head)
    assert contract is tasks.get(task).contract
    assert tuple(t.name for t in spec.outputs) == tuple(contract.output_names)
    assert tuple(t.name for t in spec.ensemble_outputs)[:len(spec.outputs)] == tuple(contract.output_names)


def wiring_errors(spec: RepoSpec, steps: tuple[EnsembleStep, ...]) -> list[str]:
    """What a step takes that nothing before it gives, and what the ensemble returns that no step gives."""
    known = {t.name for t in spec.text_inputs}
    errors = []
    for step in steps:
        errors += [f"{step.model_name} takes {t}" for t in step.input_map.values() if t not in known]
        known |= set(step.output_map.values())
    return errors + [f"nothing returns {t.name}" for t in spec.ensemble_outputs if t.name not in known]


@pytest.mark.parametrize("task", sorted(FOLDER_OF_TASK))
def test_each_step_takes_only_what_the_ensemble_or_an_earlier_step_gives(specs, task: str) -> None:
    spec = specs[task]
    assert spec.pipeline is tasks.get(task).pipeline
    assert wiring_errors(spec, spec.pipeline.ensemble_steps(spec)) == []
    assert wiring_errors(spec, spec.pipeline.fused_ensemble_steps(spec)) == []


@pytest.mark.parametrize("task", sorted(FOLDER_OF_TASK))
def test_the_pipelines_shape_decides_the_steps_of_both_variants(specs, task: str) -> None:
    spec, pipeline = specs[task], specs[task].pipeline
    production = [s.model_name for s in pipeline.ensemble_steps(spec)]
    fused = [s.model_name for s in pipeline.fused_ensemble_steps(spec)]
    post = [spec.post_step.name] if isinstance(pipeline, TokenizeModelPost) else []
    # Where no served step follows the graph, production counts its answers in a statistics step (the fused
    # step counts them itself); a post step, or a step that drives the graph, counts them where it is.
    counting = [spec.statistics_step.name] if spec.statistics_step else []
    assert bool(counting) == (pipeline.counts_after_graph and bool(spec.watched_outputs))
    if isinstance(pipeline, Orchestrated):  # the first step calls the model step itself, in both variants
        assert production == fused == [spec.first_step.name]
        assert spec.ensemble_outputs == spec.outputs
    elif isinstance(pipeline, PrepareModel):  # the first step prepares other inputs too: a step in both variants
        assert production == fused == [spec.first_step.name, spec.model_name]
        assert pipeline.fused_model_inputs(spec) == pipeline.model_inputs(spec)
    else:  # the fused variant runs the tokenizer and the model as one step
        assert production == [spec.first_step.name, spec.model_name, *counting, *post]
        assert fused == [spec.model_name, *post]
        assert [t.name for t in pipeline.fused_model_inputs(spec)] == [t.name for t in spec.text_inputs]
    assert (spec.post_step is not None) == bool(post)
    assert not (post and counting)


@pytest.mark.parametrize("task", sorted(FOLDER_OF_TASK))
def test_the_rendered_ensembles_steps_are_the_pipelines(specs, task: str) -> None:
    """The templates lay the pipeline out as it is: the ensemble config of each variant lists its steps."""
    spec = specs[task]
    common = {"repo": spec, "fused_config_name": spec.fused_config_name, "model_file": MODEL_FILE,
              "manifest_file": MANIFEST_FILE}
    for variant, steps in (("production", spec.pipeline.ensemble_steps(spec)),
                           ("fused", spec.pipeline.fused_ensemble_steps(spec))):
        [ensemble] = rendering.render_layout(
            [(CONFIG_FILE, "ensemble/config.pbtxt.j2", {"steps": steps, "fused_note": variant == "fused"})], common)
        config = rendering.parse_config(ensemble.text)
        assert [(s.model_name, dict(s.input_map), dict(s.output_map)) for s in config.ensemble_scheduling.step] == [
            (s.model_name, s.input_map, s.output_map) for s in steps], variant


@pytest.mark.parametrize("task", sorted(FOLDER_OF_TASK))
def test_the_planned_steps_are_the_roles_the_pipeline_declares(specs, task: str) -> None:
    """Planning makes one step per role the pipeline declares (a statistics step only where it counts), each
    running the module the pipeline names for that role, and chain finds each Python step's class there."""
    import importlib

    spec, pipeline = specs[task], specs[task].pipeline
    roles = [s.role for s in spec.steps]
    assert roles == [r for r in pipeline.roles if r in roles] and roles[:2] == list(pipeline.roles[:2])
    for step in spec.steps:
        assert step.module == pipeline.served_module(step.role)
        assert spec.step(step.role) is step
        if step.role.key in pipeline.served_classes:
            module = importlib.import_module(f"tritonize.serving.{step.module}")
            assert hasattr(module, pipeline.served_classes[step.role.key]), (step.module, step.role.key)
    with pytest.raises(ValueError, match="has no"):
        pipeline.served_module(next(r for r in ROLES if r not in pipeline.roles))


def test_each_tasks_own_options_are_generate_options_and_refused_by_the_others(specs) -> None:
    """A task's own options are fields of GenerateOptions (None unless given) whose flag only that task accepts."""
    import dataclasses

    from tritonize.errors import TritonizeError
    from tritonize.folder import ModelFolder

    fields = {f.name for f in dataclasses.fields(GenerateOptions)}
    assert GenerateOptions.task_options == tasks.OPTIONS and tasks.OPTIONS
    for option in tasks.OPTIONS:
        assert option.field in fields and getattr(GenerateOptions(), option.field) is None
        owner = next(t for t in tasks.TASKS.values() if option in t.own_options)
        other = next(t for t in tasks.TASKS.values() if t is not owner and t.name in FOLDER_OF_TASK)
        spec = specs[other.name]
        given = GenerateOptions(model=spec.model.source, **{option.field: _a_value(option)})
        with pytest.raises(TritonizeError, match=f"^{option.flag} does not apply to "):
            other.detector.read_head(ModelFolder.read(Path(spec.model.source)), given)


def _a_value(option):
    if option.choices:
        return option.choices[0]
    return True if option.switch else ([8] if option.parse else "texts.txt")
