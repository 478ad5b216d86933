"""--precision int8: onnxruntime's dynamic quantization for CPU, held to a per-text cosine against the model's
library and to what its task keeps of the fp32 graph on the shipped corpus; refused where nothing measures that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

from tritonize.cli import main


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


def test_bench_refuses_to_compare_another_task(tiny_embedding_repo, tiny_classifier_repo, tmp_path, capsys) -> None:
    rc = main(["bench", "-r", str(tiny_embedding_repo.repository), "--compare", str(tiny_classifier_repo.repository),
               "--peers", "none", "-o", str(tmp_path)])
    assert rc != 0 and not (tmp_path / "bench.json").exists()
    assert "its task is classification" in capsys.readouterr().err
