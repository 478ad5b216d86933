"""Export and verification on tiny random BERTs built at test time (real torch, onnx, onnxruntime)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from support.tiny_models import build_classifier, build_embedding_model
from tritonize import export, verify
from tritonize.errors import TritonizeError
from tritonize.source import read_model
from tritonize.spec.options import GenerateOptions


@pytest.fixture(scope="module")
def emb_spec(tmp_path_factory):
    return read_model(GenerateOptions(model=str(build_embedding_model(tmp_path_factory.mktemp("e") / "tiny"))))


@pytest.fixture(scope="module")
def cls_spec(tmp_path_factory):
    return read_model(GenerateOptions(model=str(build_classifier(tmp_path_factory.mktemp("c") / "tiny"))))


def _dim_params(model: onnx.ModelProto, name: str) -> list[str]:
    tensor = next(t for t in list(model.graph.input) + list(model.graph.output) if t.name == name)
    return [d.dim_param or str(d.dim_value) for d in tensor.type.tensor_type.shape.dim]


def test_embedding_graph_has_dynamic_axes_and_pooling_inside(emb_spec, tmp_path: Path) -> None:
    artifacts = export.export(emb_spec, tmp_path)
    model = onnx.load(str(artifacts.onnx))
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 17
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in model.graph.output] == ["embedding"]
    assert _dim_params(model, "input_ids") == ["batch", "sequence"]
    assert _dim_params(model, "embedding")[0] == "batch"
    session = ort.InferenceSession(str(artifacts.onnx), providers=["CPUExecutionProvider"])
    for batch, length in ((1, 3), (5, 40)):
        ids = np.full((batch, length), 7, dtype=np.int64)
        (out,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})
        assert out.shape == (batch, 32)
        assert np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)  # Normalize is in the graph


def test_embedding_verifies_against_sentence_transformers(emb_spec, tmp_path: Path) -> None:
    graph = export.load_torch_model(emb_spec)
    artifacts = export.export(emb_spec, tmp_path, graph=graph)
    report = verify.verify(emb_spec, graph, artifacts.stages, set(), atol=1e-4, min_cosine=0.999)
    assert report.reference == "sentence-transformers"
    assert report.passed is True
    assert report.stages["export"].max_abs <= 1e-4
    assert report.truncated >= 1  # the long sentences reach the max length
    verify.check(report)


def test_classifier_outputs_logits_and_probabilities(cls_spec, tmp_path: Path) -> None:
    graph = export.load_torch_model(cls_spec)
    artifacts = export.export(cls_spec, tmp_path, graph=graph)
    session = ort.InferenceSession(str(artifacts.onnx), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["logits", "probabilities"]
    logits, probs = session.run(None, verify.tokenize(cls_spec, [("hello world",), ("the dog",)]))
    assert logits.shape == probs.shape == (2, 3)
    assert np.allclose(probs.sum(1), 1.0, atol=1e-6)
    report = verify.verify(cls_spec, graph, artifacts.stages, set(), atol=1e-4, min_cosine=0.999)
    assert report.reference == "transformers pipeline" and report.output == "probabilities"
    assert report.stages["export"].argmax_agreement == 1.0


@pytest.mark.parametrize("optimize, fp16, stage", [(True, False, "optimize"), (False, True, "fp16"), (True, True, "optimize")])
def test_optimized_and_fp16_graphs_are_verified(emb_spec, tmp_path: Path, optimize: bool, fp16: bool, stage: str) -> None:
    graph = export.load_torch_model(emb_spec)
    artifacts = export.export(emb_spec, tmp_path, optimize=optimize, fp16=fp16, graph=graph)
    assert set(artifacts.stages) == {"export", stage} and artifacts.onnx == artifacts.stages[stage]
    fp16_stages = {stage} if fp16 else set()
    report = verify.verify(emb_spec, graph, artifacts.stages, fp16_stages, atol=1e-4, min_cosine=0.999)
    result = report.stages[stage]
    assert result.metric == ("min_cosine" if fp16 else "max_abs")
    assert result.passed, result
    if fp16:
        types = {i.data_type for i in onnx.load(str(artifacts.onnx)).graph.initializer}
        assert onnx.TensorProto.FLOAT16 in types


def test_external_data_for_large_models(emb_spec, tmp_path: Path) -> None:
    artifacts = export.export(emb_spec, tmp_path, external_threshold=0)
    files = artifacts.files_for(artifacts.onnx)
    assert [f.name for f in files] == ["model.onnx", "model.onnx.data"]
    assert files[1].stat().st_size > files[0].stat().st_size
    session = ort.InferenceSession(str(artifacts.onnx), providers=["CPUExecutionProvider"])
    ids = np.array([[2, 7, 3]], dtype=np.int64)
    assert session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(ids)})[0].shape == (1, 32)


def test_a_wrong_graph_fails_verification_with_numbers(emb_spec, tmp_path: Path) -> None:
    graph = export.load_torch_model(emb_spec)
    artifacts = export.export(emb_spec, tmp_path, graph=graph)
    model = onnx.load(str(artifacts.onnx))
    biggest = max(model.graph.initializer, key=lambda t: np.prod(t.dims))
    weights = onnx.numpy_helper.to_array(biggest).copy()
    weights += np.random.default_rng(0).normal(0, 0.5, weights.shape).astype(weights.dtype)
    biggest.CopyFrom(onnx.numpy_helper.from_array(weights, biggest.name))
    broken = tmp_path / "broken.onnx"
    onnx.save(model, str(broken))
    report = verify.verify(emb_spec, graph, {"export": broken}, set(), atol=1e-4, min_cosine=0.999)
    assert report.passed is False
    with pytest.raises(TritonizeError, match=r"verification against sentence-transformers failed \(export: max_abs"):
        verify.check(report)
