"""--precision int8: onnxruntime's dynamic quantization for CPU, held to a per-text cosine against the model's
library and to what its task keeps of the fp32 graph on the shipped corpus; refused where nothing measures that."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from tritonize.cli import main
from tritonize.chain import in_process


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    from model_zoo import build_token_classifier
    from tiny_models import build_classifier, build_embedding_model

    root = tmp_path_factory.mktemp("int8-src")
    return {"emb": build_embedding_model(root / "emb"), "cls": build_classifier(root / "cls"),
            "ner": build_token_classifier(root / "ner", "bert"),
            # int8 error large by construction (an outlier weight per channel): about cosine 0.99, overlap 0.5
            "lossy": build_embedding_model(root / "lossy", outliers=200.0)}


@pytest.fixture(scope="module")
def int8_repo(sources, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("int8") / "repo"
    assert main(["generate", "--model", str(sources["emb"]), "--name", "emb8", "--output", str(out), "--precision", "int8"]) == 0
    return out


def ops(path: Path) -> set[str]:
    return {n.op_type for n in onnx.load(str(path), load_external_data=False).graph.node}


def fp32_weight_matmuls(path: Path) -> int:
    """MatMuls that multiply by a stored weight (the attention's activation products are not quantized)."""
    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    return sum(n.op_type == "MatMul" and any(x in weights for x in n.input) for n in graph.node)


def test_int8_is_quantized_and_verified_with_its_figures(int8_repo) -> None:
    report = json.loads((int8_repo / "verification.json").read_text())
    int8 = report["stages"]["int8"]
    assert report["passed"] is True and int8["precision"] == "int8" and int8["passed"] is True
    assert int8["metric"] == "min_cosine" and int8["threshold"] == 0.99 and int8["min_cosine"] >= 0.99
    kept = int8["kept"]
    assert kept["figure"] == "top-10 retrieval overlap" and kept["rows"] == 400
    assert kept["threshold"] == 0.9 and 0.9 <= kept["value"] <= 1.0
    model = int8_repo / "emb8_model/1/model.onnx"
    assert {"DynamicQuantizeLinear", "MatMulInteger"} <= ops(model) and fp32_weight_matmuls(model) == 0
    assert "int8" in (int8_repo / "tritonize.yaml").read_text()


def test_int8_beyond_tolerance_fails_generation_and_writes_nothing(sources, tmp_path, capsys) -> None:
    """On a model whose int8 error is large by construction, so no runtime's rounding decides the outcome."""
    out = tmp_path / "repo"
    code = main(["generate", "--model", str(sources["lossy"]), "--output", str(out), "--precision", "int8",
                 "--min-cosine-int8", "0.999"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    found = re.search(r"int8: min_cosine ([0-9.]+) vs 0\.999, top-10 retrieval overlap ([0-9.]+) vs 0\.9 on the corpus", err)
    assert found, err
    assert float(found.group(1)) < 0.999 and float(found.group(2)) < 0.9


def test_a_classifier_keeps_its_labels(sources, tmp_path) -> None:
    out = tmp_path / "repo"
    assert main(["generate", "--model", str(sources["cls"]), "--output", str(out), "--precision", "int8"]) == 0
    kept = json.loads((out / "verification.json").read_text())["stages"]["int8"]["kept"]
    assert kept["figure"] == "argmax agreement" and kept["threshold"] == 0.99 and kept["value"] >= 0.99


@pytest.mark.parametrize("source,extra,expected", [
    ("emb", ["--device", "gpu"], "--precision int8 is for CPU deployments"),
    ("ner", [], "--precision int8 is offered for embedding, classification"),
])
def test_int8_is_refused_where_it_is_not_measured(sources, tmp_path, capsys, source, extra, expected) -> None:
    code = main(["generate", "--model", str(sources[source]), "--output", str(tmp_path / "r"), "--precision", "int8", *extra])
    err = capsys.readouterr().err
    problems = [line for line in err.splitlines() if line.startswith(("error:", "hint:", "Traceback"))]
    assert code == 2 and expected in problems[0] and len(problems) == 2  # one error line and its hint


@pytest.mark.e2e
def test_the_local_server_answers_what_the_int8_graph_computes(int8_repo, local_options, local_triton, tmp_path) -> None:
    from tritonize.client import TextClient
    from tritonize.runtime.local import LocalRuntime

    texts = ["int8 on a CPU", "the quick brown fox jumps over the lazy dog", "x"]
    chain = in_process(int8_repo)
    expected = np.concatenate([chain([(t,)]).outputs["embedding"] for t in texts])
    with LocalRuntime(local_options(int8_repo, tmp_path / "run"), quiet=True) as endpoints:
        client = TextClient(endpoints.grpc, "emb8", protocol="grpc")
        alone = np.concatenate([client.embed([t]) for t in texts])
        together = client.embed(texts)
    np.testing.assert_allclose(alone, expected, atol=1e-5)  # a text alone: exactly what the int8 graph computes
    # Dynamic quantization scales a batch's activations together, so a text's answer moves a little with the
    # texts batched beside it (docs/benchmark.md, int8); the direction stays.
    cosines = (alone * together).sum(1) / np.linalg.norm(alone, axis=1) / np.linalg.norm(together, axis=1)
    assert cosines.min() > 0.9999


def test_runtimes_measures_both_runtimes_on_each_graph(int8_repo, tiny_embedding_repo, tmp_path) -> None:
    pytest.importorskip("openvino")
    assert main(["runtimes", "-r", str(tiny_embedding_repo.repository), "-r", str(int8_repo), "--seconds", "0.2",
                 "-o", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "runtimes.json").read_text())["rows"]
    assert {(r["graph"].split()[-1], r["runtime"]) for r in rows} == {
        (p, rt) for p in ("(fp32)", "(int8)") for rt in ("onnxruntime", "openvino")}
    assert all(r["ms_per_batch"] > 0 for r in rows)
    fp32 = [r for r in rows if r["graph"].endswith("(fp32)")]
    assert max(r["max_abs_vs_onnxruntime"] for r in fp32) < 1e-4  # the same graph computes the same answer


@pytest.mark.e2e
def test_bench_measures_the_int8_repository_beside_fp32_in_one_run(int8_repo, tiny_embedding_repo, local_triton,
                                                                     tmp_path) -> None:
    """`bench --compare`: the int8 target's two figures come from one run, each repository on its own server."""
    out = tmp_path / "results"
    assert main(["bench", "-r", str(tiny_embedding_repo.repository), "--start-local", "--compare", str(int8_repo),
                 "--requests", "32", "--warmup", "5", "--concurrency", "16", "--workloads", "short", "--short-tokens", "16",
                 "--protocols", "grpc", "--baselines", "none", "-o", str(out)]) == 0
    doc = json.loads((out / "bench.json").read_text())
    assert doc["meta"]["precision"] == "fp32"
    assert doc["compared"] == {"int8": {"repository": str(int8_repo.resolve()), "model": "emb8", "precision": "int8"}}
    runs = {r["system"]: r for r in doc["runs"]}
    assert set(runs) == {"triton-grpc", "triton-grpc/int8"}
    int8 = runs["triton-grpc/int8"]
    # Measured on its own server: its counters saw exactly its requests, its model step is the int8 repository's.
    assert int8["completed"] == 32 and int8["errors"] == 0 and int8["steps"]["ensemble"]["requests"] == 32
    assert int8["steps"]["model"]["name"] == "emb8_model" and int8["cpu"]["ms_per_request"]["emb8_model"] > 0
    assert int8["label"] == "Triton gRPC int8"
    # Checked against its own graph in-process, not against the fp32 floor.
    assert all(c["passed"] for c in doc["checks"]["triton/int8"].values())
    [target] = [t for t in doc["targets"] if t["name"] == "int8 vs fp32 throughput"]
    assert target["value"] == int8["throughput_rps"]
    assert target["limit"] == pytest.approx(2.0 * runs["triton-grpc"]["throughput_rps"], abs=0.01)


def test_bench_refuses_to_compare_another_task(tiny_embedding_repo, tiny_classifier_repo, tmp_path, capsys) -> None:
    rc = main(["bench", "-r", str(tiny_embedding_repo.repository), "--compare", str(tiny_classifier_repo.repository),
               "--baselines", "none", "-o", str(tmp_path)])
    assert rc != 0 and not (tmp_path / "bench.json").exists()
    assert "its task is classification" in capsys.readouterr().err
