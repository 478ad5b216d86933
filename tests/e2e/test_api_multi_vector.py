"""A late-interaction (ColBERT) model behind the every-task API (task_stack's `colbert`, PyLate's layout: query
expansion, a punctuation skiplist), beside the stack's embedder and cross-encoder.

The rerank routes (Cohere/Jina's, text-embeddings-inference's, NVIDIA NIM's) and vLLM's /score rank by MaxSim,
equal to the library's `MultiVectorEncoder.similarity` over its own `encode_query` and `encode_document`;
/embed_all returns each text's vectors as `encode_document` (or `encode_query`) does; bad input is a 4xx in the
route family's envelope, and the API keeps serving.
"""

from __future__ import annotations

import numpy as np
import pytest

from support.task_stack import DOCUMENTS, QUERY

TOLERANCE = 1e-4
PAIRED_QUERIES = [QUERY, "a fox", "café", "who answers?"]


@pytest.fixture(scope="module")
def library(task_stack):
    from sentence_transformers import MultiVectorEncoder

    folders, _, _ = task_stack
    return MultiVectorEncoder(str(folders["colbert"]), device="cpu")


def maxsim(library, queries: list[str], documents: list[str]) -> np.ndarray:
    """The library's MaxSim of each query against each document, [len(queries), len(documents)]."""
    return library.similarity(library.encode_query(queries), library.encode_document(documents)).numpy()


@pytest.mark.parametrize("route", ["/v1/rerank", "/v2/rerank"])
def test_rerank_by_maxsim_equals_the_librarys_similarity(task_stack, library, route: str) -> None:
    _, _, api = task_stack
    expected = maxsim(library, [QUERY], DOCUMENTS)[0]
    code, _, answer = api.call("POST", route, {"model": "colbert", "query": QUERY, "documents": DOCUMENTS,
                                               "return_documents": True})
    assert code == 200, answer
    got = {r["index"]: r["relevance_score"] for r in answer["results"]}
    assert [r["index"] for r in answer["results"]] == np.argsort(-expected, kind="stable").tolist()
    assert max(abs(got[i] - float(e)) for i, e in enumerate(expected)) <= TOLERANCE
    assert all(r["document"]["text"] == DOCUMENTS[r["index"]] for r in answer["results"])
    assert answer["meta"]["tokens"]["input_tokens"] > 0


def test_tei_rerank_nim_ranking_and_score_serve_maxsim_as_the_raw_score(task_stack, library) -> None:
    """MaxSim has no activation: raw_scores, NIM's logit and vLLM's use_activation false are all the score."""
    _, _, api = task_stack
    expected = maxsim(library, [QUERY], DOCUMENTS)[0]
    code, _, ranks = api.call("POST", "/rerank", {"model": "colbert", "query": QUERY, "texts": DOCUMENTS,
                                                  "raw_scores": True})
    assert code == 200 and max(abs(r["score"] - float(expected[r["index"]])) for r in ranks) <= TOLERANCE
    code, _, ranking = api.call("POST", "/v1/ranking", {"model": "colbert", "query": {"text": QUERY},
                                                        "passages": [{"text": d} for d in DOCUMENTS]})
    assert code == 200 and [r["index"] for r in ranking["rankings"]] == [r["index"] for r in ranks]
    assert max(abs(r["logit"] - float(expected[r["index"]])) for r in ranking["rankings"]) <= TOLERANCE
    code, _, scored = api.call("POST", "/score", {"model": "colbert", "text_1": QUERY, "text_2": DOCUMENTS,
                                                  "use_activation": False})
    assert code == 200 and [d["index"] for d in scored["data"]] == list(range(len(DOCUMENTS)))
    assert max(abs(d["score"] - float(e)) for d, e in zip(scored["data"], expected)) <= TOLERANCE


def test_score_pairwise_encodes_each_text_once_and_pairs_in_order(task_stack, library) -> None:
    _, _, api = task_stack
    expected = np.diag(maxsim(library, PAIRED_QUERIES, DOCUMENTS))
    code, _, scored = api.call("POST", "/score", {"model": "colbert", "text_1": PAIRED_QUERIES, "text_2": DOCUMENTS})
    assert code == 200, scored
    assert max(abs(d["score"] - float(e)) for d, e in zip(scored["data"], expected)) <= TOLERANCE


@pytest.mark.parametrize("form", [None, "query", "document"])
def test_embed_all_returns_each_texts_vectors_as_the_library_encodes_them(task_stack, library, form) -> None:
    _, _, api = task_stack
    texts = DOCUMENTS + ["Punctuation, everywhere: here!"]
    body = {"model": "colbert", "inputs": texts, **({"prompt_name": form} if form else {})}
    code, _, answer = api.call("POST", "/embed_all", body)
    assert code == 200, answer
    encode = library.encode_query if form == "query" else library.encode_document
    expected = [e.numpy() for e in encode(texts)]
    assert [len(a) for a in answer] == [len(e) for e in expected]  # the scored vectors only, nothing padded
    assert max(float(np.abs(np.asarray(a) - e).max()) for a, e in zip(answer, expected)) <= TOLERANCE


def test_one_api_ranks_with_a_cross_encoder_and_a_late_interaction_model(task_stack, library) -> None:
    """Both rankers answer the same route by name; without a name the route cannot choose, and says so."""
    from sentence_transformers import CrossEncoder

    folders, _, api = task_stack
    cross = CrossEncoder(str(folders["ranker"]), device="cpu").predict([(QUERY, d) for d in DOCUMENTS])
    late = maxsim(library, [QUERY], DOCUMENTS)[0]
    for name, expected in (("ranker", cross), ("colbert", late)):
        code, _, answer = api.call("POST", "/v1/rerank", {"model": name, "query": QUERY, "documents": DOCUMENTS})
        assert code == 200 and answer["model"] == name
        assert max(abs(r["relevance_score"] - float(expected[r["index"]])) for r in answer["results"]) <= TOLERANCE
    code, _, answer = api.call("POST", "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
    assert code == 400 and "ranker" in answer["error"]["message"] and "colbert" in answer["error"]["message"]
    code, _, document = api.call("GET", "/openapi.json")
    rerank_body = document["components"]["schemas"]["RerankRequest"]["properties"]["model"]
    assert code == 200 and set(rerank_body["enum"]) == {"ranker", "colbert"}


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/v1/rerank", {"model": "colbert", "query": "", "documents": DOCUMENTS}, 422, "query"),
    ("/v1/rerank", {"model": "colbert", "query": QUERY, "documents": []}, 422, "documents"),
    ("/score", {"model": "colbert", "text_1": [QUERY, QUERY], "text_2": DOCUMENTS}, 422, "lengths"),
    ("/v1/embeddings", {"model": "colbert", "input": ["a text"]}, 400, "multi-vector"),
])
def test_bad_requests_to_the_late_interaction_model_are_refused(task_stack, path, body, status, words) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", path, body)
    assert code == status and words in answer["error"]["message"], answer
    code, _, answer = api.call("POST", "/v1/rerank", {"model": "colbert", "query": QUERY, "documents": DOCUMENTS})
    assert code == 200  # still serving


def test_embed_all_refusals_use_teis_envelope(task_stack) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", "/embed_all", {"model": "colbert", "inputs": ["a"], "prompt_name": "passage"})
    assert code == 422 and set(answer) == {"error", "error_type"} and "query or document" in answer["error"]
    code, _, answer = api.call("POST", "/embed_all", {"model": "emb", "inputs": ["a"]})
    assert code == 422 and "pools the token states" in answer["error"]
