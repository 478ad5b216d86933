"""One repository of six models (an embedder, a reranker, a classifier, a token classifier, extractive QA and
SPLADE), one local Triton, one API: every route answers what the model's own library computes.

Rerank results equal `CrossEncoder.predict` in order and score (Cohere/Jina's and text-embeddings-inference's
shapes; TEI's `raw_scores` the model's logits), `/predict` equals the text-classification pipeline's probabilities, `/embed_sparse` equals
`SparseEncoder.encode`, and entities and answers equal what the ensembles answer over gRPC.
"""

from __future__ import annotations

import numpy as np

from support.task_stack import DOCUMENTS, LATE_INTERACTION, MODELS, QUERY

def client(endpoints, name: str):
    from tritonize.client import TextClient

    return TextClient(endpoints.grpc, name, protocol="grpc")


def test_one_api_lists_and_checks_every_model(task_stack) -> None:
    _, _, api = task_stack
    code, _, listed = api.call("GET", "/v1/models")
    assert code == 200
    assert {m["id"]: m["task"] for m in listed["data"]} == {
        "emb": "embedding", "ranker": "rerank", "sentiment": "classification", "ner": "token-classification",
        "reader": "question-answering", "splade": "sparse-embedding", LATE_INTERACTION: "multi-vector"}
    code, _, health = api.call("GET", "/health")
    assert code == 200 and sorted(health["models"]) == sorted(["emb", *MODELS, LATE_INTERACTION])
    code, _, info = api.call("GET", "/info")
    assert code == 400 and "name one with `model`" in info["error"]  # several models: TEI's /info asks which
    assert api.call("GET", "/info?model=sentiment")[2]["model_type"]["classifier"]["id2label"]


def test_rerank_equals_cross_encoder_predict_in_order_and_score(task_stack) -> None:
    import torch
    from sentence_transformers import CrossEncoder

    folders, _, api = task_stack
    model = CrossEncoder(str(folders["ranker"]), device="cpu")
    expected = model.predict([(QUERY, d) for d in DOCUMENTS])
    logits = model.predict([(QUERY, d) for d in DOCUMENTS], activation_fn=torch.nn.Identity())
    assert np.abs(logits - expected).max() > 0.1  # the ranker's sigmoid: its logits are not its scores
    order = list(np.argsort(-expected, kind="stable"))
    for route in ("/v1/rerank", "/v2/rerank"):
        code, _, answer = api.call("POST", route, {"model": "ranker", "query": QUERY, "documents": DOCUMENTS,
                                                   "top_n": 3, "return_documents": True})
        assert code == 200 and answer["model"] == "ranker" and answer["usage"]["total_tokens"] > 0
        results = answer["results"]
        assert [r["index"] for r in results] == order[:3]
        assert all(abs(r["relevance_score"] - float(expected[r["index"]])) <= 1e-4 for r in results)
        assert [r["document"]["text"] for r in results] == [DOCUMENTS[i] for i in order[:3]]
    code, _, ranks = api.call("POST", "/rerank", {"model": "ranker", "query": QUERY, "texts": DOCUMENTS, "return_text": True})
    assert code == 200 and [r["index"] for r in ranks] == order and ranks[0]["text"] == DOCUMENTS[order[0]]
    assert max(abs(r["score"] - float(expected[r["index"]])) for r in ranks) <= 1e-4
    code, _, raw = api.call("POST", "/rerank", {"model": "ranker", "query": QUERY, "texts": DOCUMENTS, "raw_scores": True})
    assert code == 200 and [r["index"] for r in raw] == order  # the sigmoid keeps the order
    assert max(abs(r["score"] - float(logits[r["index"]])) for r in raw) <= 1e-4
    objects = [{"text": d} for d in DOCUMENTS]
    assert api.call("POST", "/v1/rerank", {"model": "ranker", "query": QUERY, "documents": objects})[2]["results"]


def test_predict_equals_the_text_classification_pipeline(task_stack) -> None:
    from transformers import pipeline

    folders, _, api = task_stack
    texts = ["a great film", "Ünïcödé café"]
    expected = pipeline("text-classification", model=str(folders["sentiment"]), device="cpu")(texts, top_k=None)
    code, _, rows = api.call("POST", "/predict", {"inputs": texts})
    assert code == 200 and len(rows) == 2
    for got, want in zip(rows, expected):
        assert [g["label"] for g in got] == [w["label"] for w in want]  # best first, every label
        assert max(abs(g["score"] - w["score"]) for g, w in zip(got, want)) <= 1e-4
    code, _, single = api.call("POST", "/predict", {"inputs": texts[0]})
    assert code == 200 and single[0]["label"] == expected[0][0]["label"]  # one text: one list, not a list of lists
    code, _, raw = api.call("POST", "/predict", {"inputs": texts[0], "raw_scores": True})
    assert code == 200 and abs(sum(r["score"] for r in raw) - 1.0) > 1e-3  # logits, not probabilities


def test_entities_answers_and_sparse_terms_are_the_ensembles(task_stack) -> None:
    from sentence_transformers import SparseEncoder

    folders, endpoints, api = task_stack
    texts = ["Sarah lives in Berlin.", "Triton serves raw strings."]
    code, _, found = api.call("POST", "/v1/entities", {"inputs": texts})
    with client(endpoints, "ner") as c:
        assert code == 200 and [row["entities"] for row in found["data"]] == c.entities(texts)
    code, _, read = api.call("POST", "/v1/answers", {"inputs": {"question": "Where does Sarah live?",
                                                                "context": texts[0]}})
    with client(endpoints, "reader") as c:
        assert code == 200 and read["data"][0]["answer"] == c.answer("Where does Sarah live?", texts[0])
    code, _, terms = api.call("POST", "/embed_sparse", {"inputs": texts})
    assert code == 200 and len(terms) == 2
    encoded = SparseEncoder(str(folders["splade"]), device="cpu").encode(texts, convert_to_tensor=True).to_dense()
    for row, want in zip(terms, encoded.numpy()):
        assert [t["index"] for t in row] == np.flatnonzero(want).tolist()
        assert max(abs(t["value"] - float(want[t["index"]])) for t in row) <= 1e-4


def test_a_route_for_another_task_names_the_served_models(task_stack) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", "/v1/embeddings", {"model": "ranker", "input": "x"})
    assert code == 400 and answer["error"]["code"] == "wrong_model_type"
    code, _, vectors = api.call("POST", "/embed", {"inputs": "x"})  # the one embedder, named by nobody
    assert code == 200 and len(vectors[0]) == 32


def test_the_document_lists_the_union_of_the_served_tasks_routes(task_stack) -> None:
    """Every task is served here, so every route is listed; `model` on a task's route names its task's models only,
    and naming another task's model is the documented 400."""
    _, _, api = task_stack
    code, _, schema = api.call("GET", "/openapi.json")
    assert code == 200
    assert set(schema["paths"]) == {"/v1/embeddings", "/v2/embed", "/v1/models", "/v1/rerank", "/embed", "/rerank",
                                    "/predict", "/tokenize", "/info", "/similarity", "/embed_all", "/decode",
                                    "/v1/ranking", "/score", "/classify", "/embed_sparse", "/v1/entities",
                                    "/v1/answers", "/health", "/metrics"}
    model = schema["components"]["schemas"]["TEIPredictRequest"]["properties"]["model"]
    assert (model.get("enum") or model["anyOf"][0]["enum"]) == ["sentiment"]
    assert "400" in schema["paths"]["/predict"]["post"]["responses"]
    code, _, answer = api.call("POST", "/predict", {"model": "emb", "inputs": "a"})
    assert code == 400 and "embedding model" in answer["error"]


def test_schemathesis_finds_the_document_true_for_every_task(task_stack, tmp_path) -> None:
    """Every route's task served, several models behind /tokenize and /info: the document names them, and a
    request it allows is answered, whichever route it reaches. The document's bound on texts per request is
    the server's (16 here: the fuzzer's largest lists stay within what two cores answer inside Triton's queue
    budget). /score refuses lists of text_1 and text_2 of different lengths (vLLM's pairing, which no JSON Schema
    of one field can say); /decode an id beyond the named model's vocabulary, under the largest one's bound. NIM's
    `logit`, TEI's `raw_scores` and vLLM's `use_activation: false` are served for the reranker (its logits) and the
    late-interaction model (MaxSim is raw) alike."""
    from support.api import ANY_MODEL, accepting, fuzz

    _, _, api = task_stack
    fuzz(api.url, tmp_path, "\n".join(accepting(r, "422") for r in (*ANY_MODEL, "/score")))
