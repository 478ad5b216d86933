"""The reading side of each task (tasks/<task>/answers.py): what clients and the API know of a served answer
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

ANSWERS = {name: task.answers for name, task in tasks.TASKS.items()}


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_client_recognises_each_task_by_the_outputs_its_ensemble_returns(name: str) -> None:
    answers = ANSWERS[name]
    assert answers.name == name
    assert tasks.for_outputs(answers.ensemble_output_names) is answers
    assert tasks.for_outputs(answers.output_names) is answers  # an ensemble read without its row outputs


def test_outputs_no_task_returns_are_refused() -> None:
    with pytest.raises(TritonizeError, match="no task returns"):
        tasks.for_outputs(["embedding", "logits", *ROW_FIELDS])


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_the_sample_request_is_one_kserve_row_per_text_input(name: str) -> None:
    answers = ANSWERS[name]
    body = json.loads(answers.sample_body("a text"))
    assert [i["name"] for i in body["inputs"]] == [t.name for t in answers.text_inputs]
    assert all(i["shape"] == [1, 1] and i["datatype"] == "BYTES" for i in body["inputs"])
    # One cell per input, as the task's row around one text puts them (a pair task's own text last, after its
    # query; a multi-vector text first, then its form).
    assert [i["data"] for i in body["inputs"]] == [[x] for x in answers.row_for("a text")]
    assert "a text" in answers.row_for("a text")
    assert answers.request([answers.row_for("x"), answers.row_for("y")]) == {
        t.name: [row[i] for row in (answers.row_for("x"), answers.row_for("y"))]
        for i, t in enumerate(answers.text_inputs)}


def test_triton_classification_strings_decode_to_labels_in_order() -> None:
    """Triton's classification extension answers "score:index:label" (":label" only with a labels file)."""
    cells = np.array([[b"0.75:2:positive", b"0.25:0:negative"], [b"0.5:1", b"0.5:0"]], dtype=object)
    parsed = parse_classes(cells)
    assert [(lb.label, lb.score, lb.index) for lb in parsed[0]] == [("positive", 0.75, 2), ("negative", 0.25, 0)]
    assert [lb.label for lb in parsed[1]] == ["1", "0"]
    rows = ANSWERS["classification"].rows({"probabilities": cells})
    assert rows[0]["labels"][0] == {"label": "positive", "score": 0.75, "index": 2}
    assert "positive 0.750" in ANSWERS["classification"].summary_line(rows[0])


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
    assert ANSWERS["sparse-embedding"].terms(outputs)[1] == [{"index": 5, "value": 2.0}]
    assert ANSWERS["sparse-embedding"].summary_line(ANSWERS["sparse-embedding"].rows(outputs)[0]).startswith("3 terms")
