"""Each task's contract (tasks/<task>/contract.py): what clients and the API know of a served answer
without anything that builds a repository."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tritonize import tasks
from tritonize.errors import TritonizeError
from tritonize.serving.batching import ROW_FIELDS
from tritonize.tasks.classification import parse_classes
from tritonize.tasks.embedding import truncate_embeddings
from tritonize.tasks.sparse_embedding import vectors as sparse_vectors

PROTOCOLS = {name: task.contract for name, task in tasks.TASKS.items()}


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_a_client_recognises_each_task_by_the_outputs_its_ensemble_returns(name: str) -> None:
    contract = PROTOCOLS[name]
    assert contract.name == name
    inputs = [t.name for t in contract.text_inputs]
    assert tasks.for_outputs(contract.ensemble_output_names, inputs) is contract
    assert tasks.for_outputs(contract.output_names, inputs) is contract  # an ensemble read without its row outputs
    # without its inputs, a task that returns the same outputs may answer (an embedder's `embedding`)
    assert tasks.for_outputs(contract.output_names).output_names == contract.output_names


def test_outputs_no_task_returns_are_refused() -> None:
    with pytest.raises(TritonizeError, match="no task returns"):
        tasks.for_outputs(["embedding", "logits", *ROW_FIELDS])


@pytest.mark.parametrize("name", sorted(PROTOCOLS))
def test_the_sample_request_is_one_kserve_row_per_text_input(name: str) -> None:
    """Each input a text's row fills (every text input; an image-text model's TEXT alone, IMAGE being the other
    optional input)."""
    contract = PROTOCOLS[name]
    body = json.loads(contract.sample_body("a text"))
    filled = list(contract.request([contract.row_for("a text")]))
    assert set(filled) <= {t.name for t in contract.text_inputs}
    assert [t.name for t in contract.text_inputs if t.name not in filled] == \
        [t.name for t in contract.text_inputs if getattr(t, "optional", False) and t.name not in filled]
    assert [i["name"] for i in body["inputs"]] == filled
    assert all(i["shape"] == [1, 1] and i["datatype"] == "BYTES" for i in body["inputs"])
    # One cell per input, as the task's row around one text puts them (a pair task's own text last, after its
    # query; a multi-vector text first, then its form).
    assert [i["data"] for i in body["inputs"]] == [[x] for x in contract.row_for("a text")]
    assert "a text" in contract.row_for("a text")
    assert contract.request([contract.row_for("x"), contract.row_for("y")]) == {
        name: [row[i] for row in (contract.row_for("x"), contract.row_for("y"))] for i, name in enumerate(filled)}


def test_triton_classification_strings_decode_to_labels_in_order() -> None:
    """Triton's classification extension answers "score:index:label" (":label" only with a labels file)."""
    cells = np.array([[b"0.75:2:positive", b"0.25:0:negative"], [b"0.5:1", b"0.5:0"]], dtype=object)
    parsed = parse_classes(cells)
    assert [(lb.label, lb.score, lb.index) for lb in parsed[0]] == [("positive", 0.75, 2), ("negative", 0.25, 0)]
    assert [lb.label for lb in parsed[1]] == ["1", "0"]
    rows = PROTOCOLS["classification"].rows({"probabilities": cells})
    assert rows[0]["labels"][0] == {"label": "positive", "score": 0.75, "index": 2}
    assert "positive 0.750" in PROTOCOLS["classification"].summary_line(rows[0])


def test_a_matryoshka_cut_is_the_first_values_renormalised_as_the_model_does() -> None:
    vectors = np.random.default_rng(0).normal(size=(3, 32)).astype(np.float32)
    cut = truncate_embeddings(vectors, 8, normalize=True)
    assert cut.shape == (3, 8)
    np.testing.assert_allclose(np.linalg.norm(cut, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(cut * np.linalg.norm(vectors[:, :8], axis=1, keepdims=True), vectors[:, :8], rtol=1e-5)
    np.testing.assert_array_equal(truncate_embeddings(vectors, 8, normalize=False), vectors[:, :8])


def test_sparse_rows_drop_the_padding_and_keep_ids_ascending() -> None:
    """Served rows are padded to the longest with index -1 and value 0."""
    indices = np.array([[3, 17, 40], [5, -1, -1]], dtype=np.int32)
    values = np.array([[0.5, 1.25, 0.125], [2.0, 0.0, 0.0]], dtype=np.float32)
    outputs = {"indices": indices, "values": values}
    [first, second] = sparse_vectors(outputs)
    assert first.indices.tolist() == [3, 17, 40] and second.indices.tolist() == [5]
    assert second.dense(8).tolist() == [0, 0, 0, 0, 0, 2.0, 0, 0]
    assert PROTOCOLS["sparse-embedding"].terms(outputs)[1] == [{"index": 5, "value": 2.0}]
    assert PROTOCOLS["sparse-embedding"].summary_line(PROTOCOLS["sparse-embedding"].rows(outputs)[0]).startswith("3 terms")


def test_a_rerankers_activation_is_applied_after_the_graph_in_one_place() -> None:
    """The served answer is the logit; the score is the head's activation of it, as torch's sigmoid gives it even
    where a float32 sigmoid saturates (and so could not be inverted back to the logit); raw is the logit itself."""
    import torch

    from tritonize.tasks.rerank import Head
    from tritonize.tasks.rerank.contract import activate

    contract = PROTOCOLS["rerank"]
    logits = np.array([[-120.0], [-18.5], [-1.25], [0.0], [0.75], [18.5], [120.0]], dtype=np.float32)
    answer = {"logit": logits}
    sigmoid = torch.sigmoid(torch.from_numpy(logits).double()).numpy().reshape(-1)
    scores = contract.scores(answer, Head("sigmoid"))
    assert scores.dtype == np.float64 and np.abs(scores - sigmoid).max() <= 1e-15
    assert np.all(np.abs(scores - sigmoid) <= 1e-12 * sigmoid)  # relative, at the small end too
    assert np.float32(scores[-2]) == 1.0  # saturated in float32: the logit is not recoverable from the score
    np.testing.assert_array_equal(contract.scores(answer, Head("sigmoid"), raw=True), logits.reshape(-1))
    np.testing.assert_array_equal(contract.scores(answer, Head("identity")), logits.reshape(-1))
    np.testing.assert_array_equal(Head("sigmoid").activate(logits), activate(logits, "sigmoid"))
    with pytest.raises(TritonizeError, match="unknown reranker activation 'softmax'"):
        activate(logits, "softmax")
    assert contract.rows(answer)[1] == {"logit": -18.5} and contract.summary_line({"logit": 0.75}) == "logit 0.7500"


def test_the_client_keeps_the_protocol_class_under_its_former_name() -> None:
    """`TextClient.task()` returns a TaskContract; code written against `tritonize.client.Answers` keeps working."""
    from tritonize import client
    from tritonize.tasks.contract import TaskContract

    assert client.Answers is TaskContract
    assert all(isinstance(p, TaskContract) for p in tasks.contracts().values())
