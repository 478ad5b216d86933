"""Several models in one repository, written: adding a model changes nothing the repository holds but its
index files; a model that cannot join is refused in one line before anything is exported, and a failure while
adding puts everything back; each keeps its manifest, report and health check.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from support.multi_model import RERANK, Stack, tree
from tritonize import repository
from tritonize.cli import main
from tritonize.errors import TritonizeError
from tritonize.generate import generate
from tritonize.manifest import entries, read_manifest, read_manifests
from tritonize.repository import INDEX_FILES, writing
from tritonize.serving import health
from tritonize.spec import MANIFEST_FILE, MODELS_KEY, VERIFICATION_FILE
from tritonize.spec.options import GenerateOptions, Overrides

# --------------------------------------------------------------------------- the repository


def test_adding_a_model_changes_only_the_index_files(stack: Stack) -> None:
    after = tree(stack.repository)
    changed = {path for path, data in stack.before.items() if after.get(path, b"gone") != data}
    assert changed == set(INDEX_FILES)
    added = set(after) - set(stack.before)
    assert {path.split("/")[0] for path in added} == {RERANK, f"{RERANK}_tokenizer", f"{RERANK}_model",
                                                                  f"{RERANK}_statistics"}
    assert f"{RERANK}_model/1/model.onnx" in added and f"{RERANK}_tokenizer/1/tokenizer.json" in added


def test_each_model_keeps_its_manifest_report_and_health_check(stack: Stack) -> None:
    repo = stack.repository
    assert [(m.name, m.model.task) for m in read_manifests(repo)] == [(stack.embedder, "embedding"), (RERANK, "rerank")]
    assert read_manifest(repo, RERANK).model.source == str(stack.reranker_source)
    with pytest.raises(TritonizeError, match=rf"holds 2 models \({stack.embedder}, {RERANK}\): name one"):
        read_manifest(repo)
    with pytest.raises(TritonizeError, match=rf"has no model 'nope' \(it holds {stack.embedder}, {RERANK}\)"):
        read_manifest(repo, "nope")
    # The first model's entries are what its one-model repository held, as written.
    old = {name: stack.before[name] for name in (MANIFEST_FILE, VERIFICATION_FILE, health.HEALTH_FILE)}
    listed = entries(yaml.safe_load((repo / MANIFEST_FILE).read_text()))
    assert listed[0] == yaml.safe_load(old[MANIFEST_FILE]) and listed[1]["name"] == RERANK
    reports = json.loads((repo / VERIFICATION_FILE).read_text())[MODELS_KEY]
    assert reports[stack.embedder] == json.loads(old[VERIFICATION_FILE])
    assert reports[RERANK]["passed"] is True and reports[RERANK]["task"] == "rerank"
    checks = health.checks_of(json.loads((repo / health.HEALTH_FILE).read_text()))
    assert checks[0] == json.loads(old[health.HEALTH_FILE])
    assert checks[1]["model"] == RERANK and [i["name"] for i in checks[1]["request"]["inputs"]] == ["QUERY", "TEXT"]
    readme = (repo / "README.md").read_text()
    assert f"/v2/models/{stack.embedder}/infer" in readme and f"/v2/models/{RERANK}/infer" in readme


@pytest.fixture
def foreign(tmp_path: Path) -> Path:
    folder = tmp_path / "foreign"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    return folder


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--name", "{embedder}", "--add"], "already holds a model named '{embedder}'"),
        (["--name", "{embedder}_model", "--add"], "already has a folder {embedder}_model/"),
        (["--name", "other"], "holds 2 models ({embedder}, rerank): writing a repository there would remove them"),
        (["--name", "other", "--add", "--version", "2"], "--add writes a new model, whose first version is 1"),
        (["--name", "other", "--add", "--force"], "--add keeps every model of the repository and --force replaces"),
        (["--version", "2"], "holds 2 models ({embedder}, rerank): name one"),
        (["--version", "2", "--name", "other"], "has no model 'other' to add version 2 to"),
        (["--name", "other", "--add", "--output", "{foreign}"], "was not written by tritonize"),
    ],
)
def test_a_model_that_cannot_join_is_refused_before_anything_is_exported(stack: Stack, foreign: Path, capsys,
                                                                        args: list[str], expected: str) -> None:
    before, before_foreign = tree(stack.repository), tree(foreign)
    values = {"embedder": stack.embedder, "foreign": foreign}
    args = [a.format(**values) for a in args]
    capsys.readouterr()
    rc = main(["generate", "--model", str(stack.reranker_source), "--output", str(stack.repository), *args])
    err = capsys.readouterr().err
    assert rc == 2
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected.format(**values) in errors[0], err
    assert "Exporting" not in err
    assert tree(stack.repository) == before and tree(foreign) == before_foreign


def test_a_manifest_of_several_models_regenerates_the_one_named(stack: Stack, tmp_path: Path, capsys) -> None:
    manifest = str(stack.repository / MANIFEST_FILE)
    capsys.readouterr()
    assert main(["generate", "--config", manifest, "--output", str(tmp_path / "none")]) == 2
    assert f"describes 2 models ({stack.embedder}, {RERANK}): name one" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    assert main(["generate", "--config", manifest, "--name", RERANK, "--output", str(tmp_path / "alone")]) == 0
    assert [m.name for m in read_manifests(tmp_path / "alone")] == [RERANK]
    for config in (stack.repository / f"{RERANK}_model").rglob("*.pbtxt"):
        twin = tmp_path / "alone" / config.relative_to(stack.repository)
        assert twin.read_text() == config.read_text()


def test_a_failed_add_puts_everything_back(stack: Stack, tmp_path: Path, monkeypatch) -> None:
    """The manifest, replaced last, cannot be written: the folders moved in and the index files already
    replaced are undone, byte for byte."""
    from support.tiny_models import build_classifier

    repo = tmp_path / "repo"
    shutil.copytree(stack.repository, repo)
    before = tree(repo)
    real = writing.replace_file

    def full_disk(path: Path, text) -> None:
        if Path(path).name == MANIFEST_FILE and isinstance(text, str):
            raise OSError("disk full")
        real(path, text)

    monkeypatch.setattr(writing, "replace_file", full_disk)
    source = build_classifier(tmp_path / "cls-src")
    with pytest.raises(OSError, match="disk full"):
        generate(GenerateOptions(model=str(source), name="sentiment", output=str(repo), add=True))
    assert tree(repo) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".repo.tritonize-")]  # no staging left


def test_tune_measures_one_model_and_writes_its_entry_only(stack: Stack, tmp_path: Path) -> None:
    from tritonize.bench.shadow import shadow_repository

    shadow = shadow_repository(stack.repository, tmp_path / "shadow", RERANK)
    assert {p.name for p in shadow.iterdir() if p.is_dir()} == {RERANK, f"{RERANK}_tokenizer", f"{RERANK}_model",
                                                                  f"{RERANK}_statistics"}
    before = yaml.safe_load((shadow / MANIFEST_FILE).read_text())[MODELS_KEY]
    repository.reconfigure(shadow, Overrides(max_queue_delay_us=300), RERANK)
    after = yaml.safe_load((shadow / MANIFEST_FILE).read_text())[MODELS_KEY]
    assert after[0] == before[0]  # the embedder's entry, as it was
    assert after[1] == {**before[1], "max_queue_delay_us": 300}
    local = repository.parse_config((shadow / f"{RERANK}_model/configs/fused.pbtxt").read_text())
    assert local.dynamic_batching.max_queue_delay_microseconds == 300
    with pytest.raises(TritonizeError, match="name one"):
        repository.reconfigure(shadow, Overrides(max_queue_delay_us=0))


def test_kubernetes_serves_every_model_from_one_deployment(stack: Stack) -> None:
    from support.k8s import container, docs, kserve_errors, kube_errors
    from tritonize.runtime import container as ct
    from tritonize import k8s

    spec = k8s.k8s_spec(k8s.K8sOptions(repository=stack.repository))
    assert spec.app == "retrieval" and spec.models == (stack.embedder, RERANK)
    rendered = docs(spec)
    for name in k8s.APPLIED:
        assert kube_errors(rendered[name]) == [], name
    assert kserve_errors(rendered[k8s.INFERENCE_SERVICE]) == []
    assert rendered[k8s.DEPLOYMENT]["metadata"]["name"] == "retrieval"
    probe = container(rendered[k8s.DEPLOYMENT])["readinessProbe"]["exec"]["command"]
    assert f"{ct.MODELS_DIR}/{health.HEALTH_FILE}" in probe  # every model's check
    assert k8s.k8s_spec(k8s.K8sOptions(repository=stack.repository, name="search")).app == "search"
