"""bench --stand-in without a server: the stand-in graph against the real one (two tasks, onnxruntime), the empty
ensemble's repository, the H100 rates and the host-CPU arithmetic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tritonize.bench import load, stand_in
from tritonize.bench.asgi_floor import answer_values
from tritonize.bench.cpu import API, CLIENT, SERVER
from tritonize.errors import TritonizeError
from tritonize.repository import parse_config
from tritonize.spec import CONFIG_FILE, MODEL_FILE, repo_paths


def signature(model: onnx.ModelProto) -> list[tuple]:
    """Each input and output: name, element type and axes (a size, or the symbolic name)."""
    weights = {w.name for w in model.graph.initializer}
    return [(kind, v.name, v.type.tensor_type.elem_type,
             [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
            for kind, values in (("in", model.graph.input), ("out", model.graph.output))
            for v in values if v.name not in weights]


@pytest.mark.parametrize("fixture", ["tiny_embedding_repo", "tiny_classifier_repo"])
def test_the_stand_in_takes_and_answers_what_the_real_graph_does(fixture, request, tmp_path) -> None:
    """Embeddings [B, dim] and a classifier's labels [B, labels]: the same names, types and shapes, in the shadow
    repository the server would load, while the real repository keeps its graph."""
    tiny = request.getfixturevalue(fixture)
    real_file = repo_paths(tiny.repository, tiny.name)["model"] / "1" / MODEL_FILE
    before = real_file.read_bytes()
    shadow = stand_in.write_stand_in(tiny.repository, tmp_path / "shadow", tiny.name)
    stand_file = repo_paths(shadow, tiny.name)["model"] / "1" / MODEL_FILE
    assert not stand_file.is_symlink() and real_file.read_bytes() == before
    real, stand = onnx.load(str(real_file)), onnx.load(str(stand_file))
    assert signature(stand) == signature(real)
    assert len(stand.graph.node) < 10 and not stand.graph.initializer  # nothing to compute
    feeds = {i.name: np.ones((3, 11), dtype=np.int64) for i in ort.InferenceSession(str(real_file)).get_inputs()}
    want = ort.InferenceSession(str(real_file)).run(None, feeds)
    got = ort.InferenceSession(str(stand_file)).run(None, feeds)
    assert [(a.shape, a.dtype) for a in got] == [(a.shape, a.dtype) for a in want]
    # every row the same varied values: what a real answer costs to write as JSON, not one value repeated
    assert all(np.array_equal(a, np.broadcast_to(answer_values(a.shape[-1]), a.shape)) for a in got)
    assert all(len(np.unique(a[0])) == a.shape[-1] for a in got if a.shape[-1] > 1)


def test_a_graph_that_tokenizes_keeps_its_tokenizer_and_fills_only_the_models_outputs(minilm_folder) -> None:
    """The graph layout: the stand-in runs the served graph's tokenizer nodes and its grouping of rows by bucket
    (the run still pays for both) and fills the model's outputs; the row outputs (tokens, truncated) are the real
    graph's."""
    from tritonize import graph_tokenizer as gt
    from tritonize.graph_tokenizer.bucketed import bucketed
    from tritonize.spec import default_buckets

    ids, mask = (helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])
                 for n in ("input_ids", "attention_mask"))
    out = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", 4])
    plain = helper.make_model(helper.make_graph(  # a "model": the sum of the ids and the mask, four times
        [helper.make_node("Add", ["input_ids", "attention_mask"], ["s"]),
         helper.make_node("Cast", ["s"], ["f"], to=TensorProto.FLOAT),
         helper.make_node("ReduceSum", ["f", "axes"], ["r"], keepdims=1),
         helper.make_node("Tile", ["r", "reps"], ["embedding"])], "m", [ids, mask], [out],
        [onnx.numpy_helper.from_array(np.array([1], np.int64), "axes"),
         onnx.numpy_helper.from_array(np.array([1, 4], np.int64), "reps")]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    tokenizer = gt.tokenizer_graph(minilm_folder / "tokenizer.json", 32, default_buckets(32), 0, False)
    real = gt.compose_model(tokenizer, bucketed(plain, default_buckets(32)), ("input_ids", "attention_mask"))
    stand = stand_in.stand_in_after_tokenizer(real, plain)
    assert signature(stand) == signature(real) and not stand.graph.initializer
    texts = np.array([["a short text"], ["a much longer text about nothing at all " * 8]], dtype=object)
    want = dict(zip([o.name for o in real.graph.output], gt.session(real).run(None, {gt.TEXT: texts})))
    got = dict(zip([o.name for o in stand.graph.output], gt.session(stand).run(None, {gt.TEXT: texts})))
    assert want["truncated"].tolist() == got["truncated"].tolist() == [[False], [True]]
    assert np.array_equal(want["tokens"], got["tokens"])
    assert got["embedding"].shape == (2, 4) and np.array_equal(got["embedding"], [answer_values(4)] * 2)
    assert not np.array_equal(want["embedding"], got["embedding"])
    with pytest.raises(TritonizeError, match="cannot find the model's graph after the tokenizer's"):
        stand_in.stand_in_after_tokenizer(gt.compose_model(tokenizer, plain, ("input_ids", "attention_mask")), plain)


def _graph(outputs: list) -> onnx.ModelProto:
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])
    return helper.make_model(helper.make_graph([], "g", [ids], outputs), opset_imports=[helper.make_opsetid("", 17)])


def test_per_token_outputs_follow_the_sequence_and_a_loose_axis_takes_the_configs_size() -> None:
    """A multi-vector model's [B, T, dim] and counts [B]; an axis the exporter left symbolic is sized from the
    step's config, and one neither sizes is refused in one line."""
    vectors = helper.make_tensor_value_info("token_vectors", TensorProto.FLOAT16, ["batch", "sequence", "Div_dim_2"])
    counts = helper.make_tensor_value_info("vector_counts", TensorProto.INT64, ["batch"])
    graph = stand_in.stand_in_graph(_graph([vectors, counts]), {"token_vectors": [-1, 8], "vector_counts": []})
    out = ort.InferenceSession(graph.SerializeToString()).run(None, {"input_ids": np.zeros((2, 5), np.int64)})
    assert [(a.shape, a.dtype) for a in out] == [((2, 5, 8), np.float16), ((2,), np.int64)]
    assert out[1].tolist() == [1, 1]
    assert np.array_equal(out[0], np.broadcast_to(answer_values(8).astype(np.float16), (2, 5, 8)))
    with pytest.raises(TritonizeError, match=r"cannot size token_vectors's axis 2 \(Div_dim_2\)"):
        stand_in.stand_in_graph(_graph([vectors]))


def test_the_empty_ensemble_takes_the_models_texts_and_is_batched_as_its_model_step(tiny_embedding_repo, tmp_path) -> None:
    repo = stand_in.write_empty(tiny_embedding_repo.repository, tmp_path / "empty", tiny_embedding_repo.name)
    model = parse_config((repo_paths(tiny_embedding_repo.repository, tiny_embedding_repo.name)["model"] / CONFIG_FILE).read_text())
    step = parse_config((repo / stand_in.EMPTY_STEP / CONFIG_FILE).read_text())
    whole = parse_config((repo / stand_in.EMPTY / CONFIG_FILE).read_text())
    assert step.platform == "onnxruntime_onnx" and whole.platform == "ensemble"
    assert step.max_batch_size == whole.max_batch_size == model.max_batch_size
    assert step.instance_group == model.instance_group and step.parameters == model.parameters
    assert [i.name for i in step.input] == [i.name for i in whole.input] == ["TEXT"]
    assert [s.model_name for s in whole.ensemble_scheduling.step] == [stand_in.EMPTY_STEP]
    session = ort.InferenceSession(str(repo / stand_in.EMPTY_STEP / "1" / MODEL_FILE))
    (out,) = session.run(None, {"TEXT": np.array([["a"], ["b c"], ["d"]], dtype=object)})
    assert out.shape == (3, 1) and out.dtype == np.int32


def test_the_empty_step_loads_no_operator_library_its_model_step_needs(tiny_embedding_repo, tmp_path) -> None:
    """A model step that tokenizes in its graph (the default) names the extensions' library; the empty step's
    fill graph needs none."""
    repo = tiny_embedding_repo.repository
    config = repo_paths(repo, tiny_embedding_repo.name)["model"] / CONFIG_FILE
    assert parse_config(config.read_text()).model_operations.op_library_filename == ["libortextensions.so"]
    empty = stand_in.write_empty(repo, tmp_path / "empty", tiny_embedding_repo.name)
    assert not parse_config((empty / stand_in.EMPTY_STEP / CONFIG_FILE).read_text()).HasField("model_operations")


def test_h100_rates_are_the_measured_figures_between_and_beyond_them() -> None:
    assert stand_in.h100_rows_per_s(16) == 67_500.0 and stand_in.h100_rows_per_s(128) == 48_500.0
    assert stand_in.h100_rows_per_s(8) == 67_500.0  # held at the shortest measured
    middle = 1 / (0.5 / 67_500 + 0.5 / 48_500)  # halfway in time per row between 16 and 128 tokens
    assert stand_in.h100_rows_per_s(72) == pytest.approx(middle)
    assert stand_in.h100_rows_per_s(512) == pytest.approx(30_400.0 / 2)
    assert stand_in.h100_rows_per_s(16, batch=256) == 234_000.0
    buckets = [16, 32, 64, 128, 256]
    assert stand_in.workload_rows_per_s([[16]] * 10, 1, buckets) == pytest.approx(67_500.0)
    # A 100-token row costs its bucket's (128) time alone, and every row of a 4-text request that holds it.
    mixed = [[10], [10], [10], [100]]
    alone = 4 / (3 / 67_500 + 1 / 48_500)
    assert stand_in.workload_rows_per_s(mixed, 1, buckets) == pytest.approx(alone)
    assert stand_in.workload_rows_per_s(mixed, 4, buckets) == pytest.approx(48_500.0)


def test_requests_of_many_texts_are_consecutive_rows_each_request_different() -> None:
    rows = [("a",), ("b",), ("c",)]
    assert load.requests_of(rows, 1) == rows
    assert load.requests_of(rows, 2) == [(("a",), ("b",)), (("b",), ("c",)), (("c",), ("a",))]


def test_host_cpu_figures_add_up_and_cores_are_cpu_per_row_times_the_rate() -> None:
    run = {"texts_per_request": 64, "steps": {"model": {"busy_ms": 64.0}},
           "cpu": {"completed": 100, "cpu_s": {SERVER: 0.5, "m_tokenizer": 1.2, "m_statistics": 0.4, API: 0.3,
                                               CLIENT: 0.2}}}
    h = stand_in.host_cpu(run, 50_000.0)
    server = [SERVER, "m_tokenizer", "m_statistics", API]
    assert h["us_per_request"][SERVER] == 5000.0 and h["us_per_row"][SERVER] == pytest.approx(5000 / 64, abs=0.01)
    assert h["server_us_per_row"] == pytest.approx(sum(h["us_per_row"][k] for k in server), abs=0.05)
    assert h["server_us_per_row"] == pytest.approx(1e6 * 2.4 / 6400, abs=0.01)  # the client is not the server's
    assert h["cores_per_h100"] == pytest.approx(2.4 / 6400 * 50_000, abs=0.01)
    assert h["cores_per_h100"] == pytest.approx(sum(h["cores_by_process"].values()), abs=0.03)
    assert h["model_us_per_row"] == 10.0  # 64 ms of executions over 6400 rows
    assert stand_in.host_cpu({"texts_per_request": 1, "cpu": {}}, 1.0) is None


@pytest.mark.parametrize("extra, message", [
    (["--stand-in", "--variant", "fused"], "--stand-in measures the production variant"),
    (["--stand-in", "--peers", "doc"], "--stand-in measures Triton alone"),
    (["--stand-in", "--baselines", "doc"], "--stand-in measures Triton alone"),  # the deprecated alias still reads
    (["--stand-in", "--compare-variant", "fused"], "--stand-in measures one repository"),
])
def test_what_a_stand_in_run_cannot_do_is_refused_before_anything_starts(extra, message, tiny_embedding_repo, tmp_path,
                                                                        capsys) -> None:
    from tritonize.cli import main

    assert main(["bench", "--repository", str(tiny_embedding_repo.repository), "--output", str(tmp_path), *extra]) != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / ".run").exists()


def test_the_floor_writes_what_a_stand_in_answers() -> None:
    """The empty ASGI endpoint answers each text with the stand-in's values, so that the floor writes as many
    varied floats as the API does."""
    import asyncio

    import orjson

    from tritonize.bench.asgi_floor import make_app

    sent: list[dict] = []
    body = orjson.dumps({"model": "m", "input": ["a", "b", "c"]})

    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(make_app(16)({"type": "http", "method": "POST", "path": "/v1/embeddings"}, receive, send))
    assert sent[0]["status"] == 200
    rows = [d["embedding"] for d in orjson.loads(sent[1]["body"])["data"]]
    assert np.array_equal(np.array(rows, dtype=np.float32), [answer_values(16)] * 3)
