"""Rendering and schema validation: both runtimes, both tasks, and atomic writes.

Every config is parsed into Triton's own ModelConfig protobuf; the checks
below read fields of that message, not strings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import yaml
from tritonclient.grpc import model_config_pb2 as mc

from support.specs import EMBEDDING
from tritonize import repository
from tritonize.errors import TritonizeError
from tritonize.manifest import CAPABILITIES_KEY, RESOLVED_KEY, Manifest
from tritonize.repository import rendering
from tritonize.serving import batching
from tritonize.spec import ModelSpec
from tritonize.spec.options import GenerateOptions, Overrides
from tritonize.tasks import classification, embedding, question_answering
from tritonize.verify import VerificationReport

CLASSIFIER = dataclasses.replace(
    EMBEDDING, head=classification.Head(labels=("neg", "pos")), architecture="BertForSequenceClassification"
)
PASSED = VerificationReport(reference="pytorch", task="embedding", passed=True)


def _render_with_options(model: ModelSpec, **options):
    """The Python tokenizer step's layout unless `tokenizer` says otherwise (test_graph_tokenizer.py holds the
    graph layout's)."""
    opts = GenerateOptions(model="/models/x", **{"tokenizer": "python", **options})
    repo = repository.plan(opts, model, "demo")
    files = repository.render(repo, repository.manifest(opts, repo), PASSED)
    return opts, repo, {f.path: f for f in files}, repository.validate(files)


def _render(model: ModelSpec, **options):
    return _render_with_options(model, **options)[1:]


def _output_dim(model: ModelSpec) -> int:
    head = model.head
    return head.dim if isinstance(head, embedding.Head) else len(head.labels)


@pytest.mark.parametrize("model", [EMBEDDING, CLASSIFIER], ids=["embedding", "classification"])
@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_every_config_parses_into_model_config(model: ModelSpec, device: str) -> None:
    repo, files, configs = _render(model, device=device)
    assert set(configs) == {
        "demo/config.pbtxt",
        "demo/configs/fused.pbtxt",  # the local server's ensemble: tokenizer and model as one step
        "demo_tokenizer/config.pbtxt",
        "demo_tokenizer/configs/fused.pbtxt",  # idle on the local server: one instance
        "demo_model/config.pbtxt",
        "demo_model/configs/fused.pbtxt",
        "demo_statistics/config.pbtxt",  # production only: counts what the graph answered
        "demo_statistics/configs/fused.pbtxt",  # idle on the local server (the fused step counts): one instance
    }
    assert configs["demo_statistics/configs/fused.pbtxt"].instance_group[0].count == 1
    counting = configs["demo_statistics/config.pbtxt"]
    assert counting.backend == "python"  # the graph's outputs, handed on under their own names
    assert [(i.name, i.data_type, list(i.dims)) for i in counting.input] == [
        (o.name, o.data_type, list(o.dims)) for o in counting.output]
    assert [o.name for o in counting.output] == (["embedding"] if model.task == "embedding" else ["probabilities"])
    idle = configs["demo_tokenizer/configs/fused.pbtxt"]
    assert idle.instance_group[0].count == 1 and idle.input == configs["demo_tokenizer/config.pbtxt"].input
    ensemble, tokenizer = configs["demo/config.pbtxt"], configs["demo_tokenizer/config.pbtxt"]
    container, local = configs["demo_model/config.pbtxt"], configs["demo_model/configs/fused.pbtxt"]

    assert ensemble.platform == "ensemble"
    assert tokenizer.backend == "python"
    # On a CPU the model step runs its batch's rows in runs, from its own graph file; a GPU takes them whole.
    assert container.platform == "onnxruntime_onnx"
    assert container.default_model_filename == ("model_runs.onnx" if device == "cpu" else "model.onnx")
    assert local.backend == "python"
    # Every step that can batch does.
    for config in (tokenizer, container, local):
        assert config.max_batch_size > 0
        assert config.HasField("dynamic_batching")
        assert len(config.instance_group) == 1 and config.instance_group[0].count >= 1
    assert ensemble.max_batch_size > 0
    expected_kind = mc.ModelInstanceGroup.KIND_GPU if device == "gpu" else mc.ModelInstanceGroup.KIND_CPU
    assert container.instance_group[0].kind == expected_kind
    assert local.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU  # the local server has no GPU path
    assert tokenizer.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    # The local step takes the texts (equal shapes, so no ragged batches); the container's graph takes tokens.
    assert [i.name for i in local.input] == ["TEXT"] and not any(i.allow_ragged_batch for i in local.input)
    assert not any(i.allow_ragged_batch for i in container.input)
    # Two instances of every batching step whose queue Triton bounds: a bounded queue's only instance leaves Triton
    # 2.51's batcher asleep. The local one step bounds its own queue and pipelines, in one instance.
    assert all(c.instance_group[0].count == 2 for c in (tokenizer, container))
    assert local.instance_group[0].count == 1 and not local.dynamic_batching.HasField("default_queue_policy")
    assert local.parameters["max_queue_size"].string_value == str(container.dynamic_batching.default_queue_policy.max_queue_size)

    assert [i.name for i in ensemble.input] == ["TEXT"]
    assert ensemble.input[0].data_type == mc.TYPE_STRING and list(ensemble.input[0].dims) == [1]
    expected_outputs = ["embedding"] if model.task == "embedding" else ["logits", "probabilities"]
    # Then, per row, the tokens the model read and whether the text was cut (usage counts, strict truncation).
    assert [o.name for o in ensemble.output] == [*expected_outputs, "tokens", "truncated"]
    assert all(o.data_type == mc.TYPE_FP32 for o in ensemble.output[: len(expected_outputs)])
    assert [(o.data_type, list(o.dims)) for o in ensemble.output[-2:]] == [(mc.TYPE_INT32, [1]), (mc.TYPE_BOOL, [1])]
    assert list(ensemble.output[0].dims) == [_output_dim(model)]


@pytest.mark.parametrize("model", [EMBEDDING, CLASSIFIER], ids=["embedding", "classification"])
def test_ensemble_wiring_matches_the_steps(model: ModelSpec) -> None:
    """Both ensembles, the container's over its steps and the local server's over the local configs, connect
    every input to a tensor produced before it and return the same outputs."""
    _, _, configs = _render(model)
    container_steps = {c.name: c for p, c in configs.items() if c.platform != "ensemble" and "/configs/" not in p}
    local_steps = container_steps | {c.name: c for p, c in configs.items() if p.endswith("/configs/fused.pbtxt")}
    for path, steps in (("demo/config.pbtxt", container_steps), ("demo/configs/fused.pbtxt", local_steps)):
        ensemble = configs[path]
        produced = {"TEXT"}
        for step in ensemble.ensemble_scheduling.step:
            target = steps[step.model_name]
            assert set(step.input_map) == {i.name for i in target.input}
            assert set(step.input_map.values()) <= produced  # every input is produced earlier
            assert set(step.output_map) <= {o.name for o in target.output}
            produced |= set(step.output_map.values())
        assert {o.name for o in ensemble.output} <= produced
    assert configs["demo/config.pbtxt"].output == configs["demo/configs/fused.pbtxt"].output
    assert len(configs["demo/configs/fused.pbtxt"].ensemble_scheduling.step) == 1


def test_classification_labels_are_written_where_configs_name_them() -> None:
    _, files, configs = _render(CLASSIFIER)
    for path in ("demo/config.pbtxt", "demo_model/config.pbtxt"):
        named = [o for o in configs[path].output if o.name in ("logits", "probabilities")]
        assert {o.label_filename for o in named} == {"labels.txt"}
        assert not any(o.label_filename for o in configs[path].output if o not in named)
        labels = files[path.replace("config.pbtxt", "labels.txt")].text.splitlines()
        assert labels == ["neg", "pos"]


def test_options_reach_the_configs() -> None:
    repo, _, configs = _render(
        EMBEDDING, max_batch_size=16, max_queue_delay_us=250, tokenizer_instances=2, model_instances=3, buckets=[8, 64]
    )
    tok, local = configs["demo_tokenizer/config.pbtxt"], configs["demo_model/configs/fused.pbtxt"]
    assert tok.max_batch_size == 16 and tok.dynamic_batching.max_queue_delay_microseconds == 250
    assert tok.instance_group[0].count == 2 and local.instance_group[0].count == 3
    assert tok.parameters["buckets"].string_value == "8,64,256"  # the max length always closes the ladder
    assert tok.parameters["max_length"].string_value == "256"
    assert repo.buckets == (8, 64, 256)


def test_default_buckets_follow_the_max_length() -> None:
    repo, _, _ = _render(dataclasses.replace(EMBEDDING, max_length=100))
    assert repo.buckets == (16, 32, 64, 100)


def test_tensorrt_block_only_on_gpu() -> None:
    _, _, configs = _render(EMBEDDING, device="gpu", tensorrt=True, precision="fp16")
    accel = configs["demo_model/config.pbtxt"].optimization.execution_accelerators.gpu_execution_accelerator
    assert [a.name for a in accel] == ["tensorrt"]
    assert accel[0].parameters["precision_mode"] == "FP16"
    _, _, plain = _render(EMBEDDING, device="gpu")
    assert not plain["demo_model/config.pbtxt"].HasField("optimization")
    with pytest.raises(TritonizeError, match="--tensorrt needs --device gpu"):
        _render(EMBEDDING, tensorrt=True)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_batch_size": 0}, "--max-batch-size"),
        ({"model_instances": 0}, "--model-instances"),
        ({"max_queue_delay_us": -1}, "--max-queue-delay-us"),
        ({"max_request_bytes": -1}, "--max-request-bytes must be 0 or more"),
        ({"gather_us": -1}, "--gather-us must be 0 or more"),
        ({"queue_budget_ms": 0}, "--queue-budget-ms must be more than 0"),
        ({"capacity_rps": -5.0}, "--capacity-rps must be more than 0"),
    ],
)
def test_bad_numbers_are_refused(options: dict, message: str) -> None:
    with pytest.raises(TritonizeError, match=message):
        _render(EMBEDDING, **options)


def test_no_truncate_is_refused_where_nothing_is_truncated() -> None:
    qa = dataclasses.replace(EMBEDDING, head=question_answering.Head(question_first=True, cls_token_id=101),
                             architecture="BertForQuestionAnswering")
    with pytest.raises(TritonizeError, match="^--no-truncate does not apply to question-answering: every context is "
                                             "read whole, in windows$"):
        _render(qa, truncate=False)
    _, _, configs = _render(CLASSIFIER, truncate=False)
    assert configs["demo_tokenizer/config.pbtxt"].parameters["truncate"].string_value == "0"


def test_schema_rejects_unknown_fields_and_bad_values() -> None:
    with pytest.raises(TritonizeError, match="not a valid Triton ModelConfig"):
        repository.parse_config('name: "x"\nmax_batch_sise: 4\n')
    with pytest.raises(TritonizeError, match="not a valid Triton ModelConfig"):
        repository.parse_config('name: "x"\ninstance_group [ { kind: KIND_TPU } ]\n')


@pytest.mark.parametrize("model", [EMBEDDING, CLASSIFIER], ids=["embedding", "classification"])
def test_manifest_round_trips_to_options_and_model(model: ModelSpec) -> None:
    repo, files, _ = _render(model, max_queue_delay_us=123)
    data = yaml.safe_load(files["tritonize.yaml"].text)
    assert data["name"] == "demo" and data["max_queue_delay_us"] == 123 and data["buckets"] == list(repo.buckets)
    assert data[RESOLVED_KEY]["head"]["task"] == model.task
    options = {k: v for k, v in data.items() if k not in (RESOLVED_KEY, CAPABILITIES_KEY)}
    assert GenerateOptions(**options).max_queue_delay_us == 123
    back = Manifest.from_dict(data)
    assert back.model == model and back.name == "demo" and back.options.max_queue_delay_us == 123
    assert back.capabilities == repo.pipeline.capabilities == tuple(data[CAPABILITIES_KEY])


@pytest.mark.parametrize("options, precision, optimize, max_batch_size", [
    ({}, "fp32", False, 64),  # CPU: as before the GPU defaults
    ({"device": "gpu"}, "fp16", True, 256),  # the H100 measurement (spec.GPU_DEFAULTS, docs/benchmark.md#gpu)
    ({"device": "gpu", "tensorrt": True}, "fp16", False, 256),  # TensorRT fuses itself
    ({"device": "gpu", "precision": "fp32"}, "fp32", True, 256),
    ({"device": "gpu", "optimize": False}, "fp16", False, 256),
    ({"device": "gpu", "max_batch_size": 32}, "fp16", True, 32),
    ({"device": "gpu", "tensorrt": True, "optimize": True}, "fp16", True, 256),
    ({"optimize": True}, "fp32", True, 64),  # CPU fusions stay opt-in
], ids=["cpu", "gpu", "gpu-tensorrt", "gpu-fp32", "gpu-no-optimize", "gpu-batch-32", "gpu-tensorrt-optimize",
        "cpu-optimize"])
def test_the_device_decides_what_is_not_given(options, precision, optimize, max_batch_size) -> None:
    repo, files, configs = _render(EMBEDDING, **options)
    written = yaml.safe_load(files["tritonize.yaml"].text)
    resolved = (written["precision"], written["optimize"], written["max_batch_size"])
    assert resolved == (precision, optimize, max_batch_size)
    assert repo.precision == precision
    for path in ("demo/config.pbtxt", "demo_tokenizer/config.pbtxt", "demo_model/config.pbtxt"):
        assert configs[path].max_batch_size == max_batch_size
    model = configs["demo_model/config.pbtxt"]
    assert model.instance_group[0].kind == (mc.ModelInstanceGroup.KIND_GPU if options.get("device") == "gpu"
                                            else mc.ModelInstanceGroup.KIND_CPU)


def test_cpu_repositories_are_what_they_were() -> None:
    """The CPU defaults written out by hand, as they stood before the GPU defaults: every file the same."""
    _, files, _ = _render(EMBEDDING)
    _, explicit, _ = _render(EMBEDDING, device="cpu", precision="fp32", optimize=False, max_batch_size=64)
    assert {p: f.text for p, f in files.items()} == {p: f.text for p, f in explicit.items()}


@pytest.mark.parametrize("options", [{"device": "gpu"}, {"device": "gpu", "tensorrt": True}, {}],
                         ids=["gpu", "tensorrt", "cpu"])
def test_regenerating_from_the_written_manifest_gives_the_same_repository(options) -> None:
    opts, repo, files, _ = _render_with_options(EMBEDDING, **options)
    back = Manifest.from_dict(yaml.safe_load(files["tritonize.yaml"].text))
    assert back.options == repository.manifest(opts, repo).options  # what was resolved, not None
    again = repository.plan(back.options, EMBEDDING, "demo")
    rendered = {f.path: f.text for f in repository.render(again, repository.manifest(back.options, again), PASSED)}
    assert rendered == {p: f.text for p, f in files.items()}


def test_int8_stays_on_cpu() -> None:
    with pytest.raises(TritonizeError, match="--precision int8 is for CPU deployments"):
        _render(EMBEDDING, device="gpu", precision="int8")


def test_a_device_not_offered_is_one_line() -> None:
    with pytest.raises(TritonizeError, match=r"device must be one of cpu, gpu \(got 'tpu'\)"):
        GenerateOptions(model="/models/x", device="tpu")


def test_manifest_of_another_layout_is_refused_with_one_line() -> None:
    with pytest.raises(TritonizeError, match="regenerate the repository"):
        Manifest.from_dict({"name": "demo", RESOLVED_KEY: {"task": "embedding", "pooling": "mean"}})


def test_templates_hold_layout_only() -> None:
    from tritonize import paths

    names = [p.name for p in paths.TEMPLATES_DIR.rglob("*") if p.is_file()]
    assert names and not [n for n in names if ".py" in n]  # no Python is generated from Jinja


def test_readme_curl_declares_json() -> None:
    _, files, _ = _render(EMBEDDING)
    readme = files["README.md"].text
    assert "Content-Type: application/json" in readme and '"name": "TEXT"' in readme


# --- writing -------------------------------------------------------------------------------------------


def _files_and_binary(tmp_path: Path):
    repo, files, _ = _render(EMBEDDING)
    onnx = tmp_path / "graph.onnx"
    onnx.write_bytes(b"not really onnx")
    return list(files.values()), {"demo_model/1/model.onnx": onnx, **repository.served_files(repo)}


def test_write_creates_a_complete_repository(tmp_path: Path) -> None:
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "repo"
    repository.write(files, binaries, out, repository.staging_dir(out))
    for rel in ("demo/config.pbtxt", "demo/1", "demo_tokenizer/1/model.py", "demo_model/1/model.onnx",
                "demo_model/configs/fused.pbtxt", "tritonize.yaml", "verification.json"):
        assert (out / rel).exists(), rel
    assert VerificationReport.from_dict(json.loads((out / "verification.json").read_text())) == PASSED


@pytest.mark.parametrize("old", ["variants", "forms"])
def test_verification_written_with_an_old_key_for_derived_answers_still_reads(old: str) -> None:
    """verification.json written before the derived answers were called so lists them under "variants", or later
    "forms"."""
    form = {"max_abs": 1e-6, "mean_abs": 1e-7, "min_cosine": 1.0, "argmax_agreement": 1.0, "metric": "max_abs",
            "threshold": 1e-4, "passed": True, "precision": "fp32"}
    report = VerificationReport.from_dict({**PASSED.to_dict(), old: {"dim 8": form}})
    assert list(report.derived) == ["dim 8"] and report.derived["dim 8"].passed
    assert "derived" in report.to_dict() and old not in report.to_dict()


def test_foreign_directory_is_refused_and_kept(tmp_path: Path) -> None:
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    with pytest.raises(TritonizeError, match="not written by tritonize"):
        repository.write(files, binaries, out, repository.staging_dir(out))
    assert (out / "precious.txt").read_text() == "keep me"
    repository.write(files, binaries, out, repository.staging_dir(out), force=True)
    assert not (out / "precious.txt").exists() and (out / "tritonize.yaml").exists()


def test_regeneration_replaces_and_keeps_dotfiles(tmp_path: Path) -> None:
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "repo"
    out.mkdir()
    (out / ".gitkeep").write_text("")
    repository.write(files, binaries, out, repository.staging_dir(out))
    (out / "demo" / "stale.txt").write_text("old")
    repository.write(files, binaries, out, repository.staging_dir(out))
    assert (out / ".gitkeep").exists()
    assert not (out / "demo" / "stale.txt").exists()


def test_invalid_config_leaves_the_old_repository_untouched(tmp_path: Path) -> None:
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "repo"
    repository.write(files, binaries, out, repository.staging_dir(out))
    before = (out / "demo" / "config.pbtxt").read_text()
    broken = [
        dataclasses.replace(f, text=f.text.replace("max_batch_size", "max_batch_sise")) if f.path == "demo/config.pbtxt" else f
        for f in files
    ]
    staging = repository.staging_dir(out)
    with pytest.raises(TritonizeError, match="demo/config.pbtxt is not a valid Triton ModelConfig"):
        repository.write(broken, binaries, out, staging)
    assert (out / "demo" / "config.pbtxt").read_text() == before


def test_failed_swap_puts_the_previous_repository_back(tmp_path: Path, monkeypatch) -> None:
    """The final rename fails: the repository that was there is still there, dotfiles included."""
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "repo"
    repository.write(files, binaries, out, repository.staging_dir(out))
    (out / ".gitkeep").write_text("")
    before = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    real_replace = os.replace

    def failing(src, dst):
        if Path(src).name == "repository" and Path(dst) == out:
            raise OSError("disk full")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="disk full"):
        repository.write(files, binaries, out, repository.staging_dir(out))
    monkeypatch.undo()
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == before


def test_template_error_is_a_generation_error(tmp_path: Path, monkeypatch) -> None:
    templates = tmp_path / "templates"
    import shutil

    from tritonize import paths

    shutil.copytree(paths.TEMPLATES_DIR, templates)
    (templates / "ensemble" / "config.pbtxt.j2").write_text('name: "{{ repo.no_such_field }}"\n')
    monkeypatch.setattr(rendering, "TEMPLATES_DIR", templates)
    with pytest.raises(TritonizeError, match="ensemble/config.pbtxt.j2 failed to render"):
        _render(EMBEDDING)


def test_reconfigure_rewrites_only_configs(tmp_path: Path) -> None:
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "repo"
    repository.write(files, binaries, out, repository.staging_dir(out))
    onnx_before = (out / "demo_model/1/model.onnx").read_bytes()
    repository.reconfigure(out, Overrides(max_queue_delay_us=42, model_instances=2, max_batch_size=8, gather_us=0))
    local = repository.parse_config((out / "demo_model/configs/fused.pbtxt").read_text())
    assert local.dynamic_batching.max_queue_delay_microseconds == 42
    assert local.parameters[batching.GATHER].string_value == "0"  # a `tune` grid key: the one step's gather window
    assert local.instance_group[0].count == 2 and local.max_batch_size == 8
    assert repository.parse_config((out / "demo/config.pbtxt").read_text()).max_batch_size == 8
    assert yaml.safe_load((out / "tritonize.yaml").read_text())["max_queue_delay_us"] == 42
    assert yaml.safe_load((out / "tritonize.yaml").read_text())["gather_us"] == 0
    assert (out / "demo_model/1/model.onnx").read_bytes() == onnx_before
    with pytest.raises(TritonizeError, match="unknown option"):
        repository.reconfigure(out, Overrides.of({"max_queue_delay": 1}))


@pytest.mark.parametrize("changes,runs", [
    ({}, True),
    ({"model_runs": False}, False),
    ({"device": "gpu"}, False),  # a GPU takes its batches whole
    ({"precision": "int8"}, False),  # dynamic quantization reads the whole batch's ranges
    ({"tokenizer": "graph"}, False),  # the graph that tokenizes runs its own runs
])
def test_the_model_step_runs_its_batches_in_runs_on_a_cpu_behind_the_python_tokenizer(changes: dict,
                                                                                       runs: bool) -> None:
    opts = GenerateOptions(model="/models/x", **{"tokenizer": "python", **changes})
    repo = repository.plan(opts, EMBEDDING, "demo")
    assert repo.model_runs is runs
    assert repo.model_file == ("model_runs.onnx" if runs else repo.pipeline.model_file)


def test_a_model_step_whose_answers_have_a_row_per_token_runs_its_batches_whole() -> None:
    """A token classifier's logits are [rows, tokens, labels]: cut to a run's width, rows of one batch would not
    line up again, so its model step keeps the plain graph."""
    from tritonize.tasks import token_classification

    model = dataclasses.replace(EMBEDDING, head=token_classification.Head(labels=("O", "B-X"), aggregation="simple"),
                                architecture="BertForTokenClassification")
    repo = repository.plan(GenerateOptions(model="/models/x", tokenizer="python"), model, "demo")
    assert not repo.model_runs and repo.model_file == "model.onnx"


def test_a_repository_written_before_runs_keeps_its_model_steps_graph_when_reconfigured(tmp_path: Path) -> None:
    files, binaries = _files_and_binary(tmp_path)
    out = tmp_path / "repo"
    repository.write(files, binaries, out, repository.staging_dir(out))
    assert not (out / "demo_model/1/model_runs.onnx").exists()
    repository.reconfigure(out, Overrides(max_queue_delay_us=7))
    config = repository.parse_config((out / "demo_model/config.pbtxt").read_text())
    assert config.default_model_filename == "model.onnx"
    assert config.dynamic_batching.max_queue_delay_microseconds == 7
    # A manifest written before the option was recorded reads as runs off: such a repository has no runs graph.
    data = yaml.safe_load((out / "tritonize.yaml").read_text())
    data.pop("model_runs", None)
    assert Manifest.from_dict(data).options.model_runs is False


def test_each_tasks_answers_expect_the_row_outputs_its_pipeline_returns() -> None:
    """A client reads each row's tokens exactly where the task's ensemble returns them."""
    from tritonize import tasks

    for task in tasks.TASKS.values():
        assert task.contract.reports_tokens == bool(task.pipeline.row_outputs), task.name
        assert task.contract.ensemble_output_names[len(task.contract.output_names):] == tuple(
            t.name for t in task.pipeline.row_outputs)
