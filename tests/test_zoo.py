"""Every family and layout a user brings (tests/model_zoo.py), through the whole generator.

Each folder is built the way current libraries save it, then generated: its task must be the folder's own
head, and verification must pass against the model's own library (sentence-transformers' encode,
CrossEncoder.predict, the model's transformers class, the token-classification pipeline, the
question-answering pipeline's steps). A head tritonize cannot serve exactly is refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import model_zoo
from tritonize.errors import TritonizeError
from tritonize.generate import generate
from tritonize.repository import parse_config
from tritonize.spec import GenerateOptions

# The zoo's task names -> what tritonize serves them as.
SERVED_AS = {"embedding": "embedding", "classification": "classification", "reranker": "rerank",
             "token-classification": "token-classification", "question-answering": "question-answering"}
REFERENCE = {"embedding": "sentence-transformers", "classification": "transformers pipeline",
             "rerank": "sentence-transformers CrossEncoder", "token-classification": "transformers",
             "question-answering": "transformers"}
# Where a served step follows (or drives) the graph: the whole answer against the model's library.
ANSWERS = {"token-classification": {"reference": "transformers pipeline", "rows": 16, "agree": 16, "passed": True},
           "question-answering": {"reference": "question-answering pipeline steps", "rows": 6, "agree": 6, "passed": True}}


@pytest.fixture(scope="module")
def zoo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.parametrize("entry", model_zoo.ZOO, ids=[e.id for e in model_zoo.ZOO])
def test_every_folder_is_served_exactly(entry, zoo_root: Path, tmp_path: Path) -> None:
    folder = model_zoo.build(entry, zoo_root)
    task = SERVED_AS[entry.task]
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["task"] == task
    assert report["reference"] == REFERENCE[task]
    assert report["passed"] is True and report["stages"]["export"]["max_abs"] <= 1e-4
    assert report.get("answers") == ANSWERS.get(task)
    # The container's model step: Triton's own onnxruntime backend, its tensors those of the local config.
    model_dir = repo / "zoo_model"
    container = parse_config((model_dir / "config.pbtxt").read_text())
    local = parse_config((model_dir / "configs" / "local.pbtxt").read_text())
    assert container.platform == "onnxruntime_onnx" and local.backend == "python"
    assert [(o.name, list(o.dims)) for o in container.output] == [(o.name, list(o.dims)) for o in local.output]


def test_a_multi_label_head_is_served_with_a_sigmoid_per_label(zoo_root: Path, tmp_path: Path) -> None:
    """The pipeline, the model's own class and the repository's graph agree: sigmoid(logits), not a softmax."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from tritonize.steps import in_process

    folder = model_zoo.build("bert-seq-cls-multilabel", zoo_root)
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["output"] == "probabilities" and report["reference"] == "transformers pipeline"
    texts = ["a short text", "Ünïcödé café, naïve", "The quick brown fox jumps over the lazy dog."]
    served = np.concatenate([in_process(repo)([(t,)]).outputs["probabilities"] for t in texts])
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        sigmoid = torch.sigmoid(model(**tokenizer(texts, padding=True, return_tensors="pt")).logits).numpy()
    by_label = [{d["label"]: d["score"] for d in row} for row in pipeline("text-classification", model=str(folder))(
        texts, top_k=None)]
    piped = np.array([[row[model.config.id2label[i]] for i in range(model.config.num_labels)] for row in by_label])
    assert np.abs(served - sigmoid).max() <= 1e-5 and np.abs(served - piped).max() <= 1e-5
    assert np.abs(served.sum(1) - 1).max() > 0.05


@pytest.mark.parametrize("problem_type", ["regression", "multi_class_ranking"])
def test_a_problem_type_not_served_is_refused_in_one_line(problem_type: str, zoo_root: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "cls"
    shutil.copytree(model_zoo.build("bert-seq-cls", zoo_root), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "problem_type": problem_type}))
    with pytest.raises(TritonizeError) as info:
        generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    message = str(info.value)
    assert f"problem_type {problem_type!r}" in message and "multi_label_classification (sigmoid)" in message
    assert "\n" not in message and not (tmp_path / "repo").exists()


@pytest.mark.parametrize("layout", ["sbert_ce_default_activation_function", "sentence_transformers"])
def test_older_cross_encoder_layouts_keep_their_activation(layout: str, zoo_root: Path, tmp_path: Path) -> None:
    """sentence-transformers < 4 and 4.x kept the activation in config.json; CrossEncoder.predict reads it there."""
    import shutil

    folder = tmp_path / "old-ce"
    shutil.copytree(model_zoo.build("bert-hub-reranker", zoo_root), folder)
    config = json.loads((folder / "config.json").read_text())
    identity = "torch.nn.modules.linear.Identity"
    config.update({layout: identity} if layout.startswith("sbert") else {layout: {"activation_fn": identity}})
    (folder / "config.json").write_text(json.dumps(config))
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["passed"] and report["reference"] == "sentence-transformers CrossEncoder"
    assert "identity score" in (repo / "README.md").read_text()


def test_a_head_tritonize_cannot_serve_is_refused_with_one_line(tmp_path: Path) -> None:
    """A masked-LM head is neither embedding nor classification: refused, never served as something else."""
    from tiny_models import _config, build_tokenizer
    from transformers import BertForMaskedLM

    folder = tmp_path / "mlm"
    config = _config()
    config.architectures = ["BertForMaskedLM"]
    BertForMaskedLM(config).save_pretrained(folder)
    build_tokenizer(folder, 64)
    with pytest.raises(TritonizeError, match="cannot serve a BertForMaskedLM exactly") as info:
        generate(GenerateOptions(model=str(folder), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value) and "question-answering" in info.value.hint
