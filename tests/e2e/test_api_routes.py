"""The request shapes retrieval stacks send besides OpenAI's and Cohere's, on the every-task API (task_stack) and,
for a causal LLM reranker without an activation, on one of its own: NVIDIA NIM's /v1/ranking, vLLM's /score and
/classify, text-embeddings-inference's /similarity, /embed_all and /decode.

Each answer equals the model's own library (CrossEncoder.predict, SentenceTransformer.encode with cos_sim, the
text-classification pipeline, the tokenizer's decode); each refusal is a 4xx in the route family's envelope.
"""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest

from support import model_zoo
from support.api import api_over_triton
from support.task_stack import DOCUMENTS, QUERY

TOLERANCE = 1e-4
LONG = " ".join(["A long passage that the reranker cannot read whole."] * 60)

# The shapes each family publishes, as JSON Schema: NIM's reranking API reference (RankingResponse), vLLM's
# ScoreResponse and ClassificationResponse (its pooling protocol models), text-embeddings-inference's
# SimilarityResponse and DecodeResponse (router/src/http/types.rs).
NIM_RANKING = {"type": "object", "required": ["rankings"], "properties": {"rankings": {"type": "array", "items": {
    "type": "object", "required": ["index", "logit"],
    "properties": {"index": {"type": "integer"}, "logit": {"type": "number"}}}}}}
VLLM_USAGE = {"type": "object", "required": ["prompt_tokens", "total_tokens"],
              "properties": {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}}}
VLLM_SCORE = {"type": "object", "required": ["id", "object", "created", "model", "data", "usage"], "properties": {
    "object": {"const": "list"}, "created": {"type": "integer"}, "model": {"type": "string"}, "usage": VLLM_USAGE,
    "data": {"type": "array", "items": {"type": "object", "required": ["index", "object", "score"], "properties": {
        "index": {"type": "integer"}, "object": {"const": "score"}, "score": {"type": "number"}}}}}}
VLLM_CLASSIFY = {"type": "object", "required": ["id", "object", "created", "model", "data", "usage"], "properties": {
    "object": {"const": "list"}, "usage": VLLM_USAGE,
    "data": {"type": "array", "items": {"type": "object", "required": ["index", "label", "probs", "num_classes"],
                                        "properties": {"index": {"type": "integer"},
                                                       "label": {"type": ["string", "null"]},
                                                       "probs": {"type": "array", "items": {"type": "number"}},
                                                       "num_classes": {"type": "integer"}}}}}}
TEI_SIMILARITY = {"type": "array", "items": {"type": "number"}}
TEI_DECODE = {"type": "array", "items": {"type": "string"}}


def nim_error(answer: dict) -> str:
    """NIM's envelope: the message, once the shape is checked."""
    assert answer["object"] == "error" and isinstance(answer["detail"], dict) and answer["type"], answer
    return answer["message"]


def openai_error(answer: dict) -> str:
    assert set(answer["error"]) == {"message", "type", "param", "code"}, answer
    return answer["error"]["message"]


def tei_error(answer: dict) -> str:
    assert set(answer) == {"error", "error_type"}, answer
    return answer["error"]


# -- vLLM's /score and NIM's /v1/ranking on the stack's cross-encoder (a sigmoid CrossEncoder) ---------------------
def test_score_equals_cross_encoder_predict_one_to_many_and_pairwise(task_stack) -> None:
    """Scores as predict returns them by default; with `use_activation: false`, the model's logits."""
    import torch
    from sentence_transformers import CrossEncoder

    folders, _, api = task_stack
    model = CrossEncoder(str(folders["ranker"]), device="cpu")
    expected = model.predict([(QUERY, d) for d in DOCUMENTS])
    logits = model.predict([(QUERY, d) for d in DOCUMENTS], activation_fn=torch.nn.Identity())
    assert np.abs(logits - expected).max() > 0.1
    for route in ("/score", "/v1/score"):
        code, _, answer = api.call("POST", route, {"model": "ranker", "text_1": QUERY, "text_2": DOCUMENTS})
        assert code == 200 and answer["model"] == "ranker", answer
        jsonschema.validate(answer, VLLM_SCORE)
        assert answer["id"] and answer["created"] > 0 and answer["usage"]["prompt_tokens"] > 0
        assert [d["index"] for d in answer["data"]] == list(range(len(DOCUMENTS)))  # in order, not ranked
        assert {d["object"] for d in answer["data"]} == {"score"}
        assert max(abs(d["score"] - float(e)) for d, e in zip(answer["data"], expected)) <= TOLERANCE
    queries = [QUERY, "a fox", "café", "who answers?"]
    pairwise = model.predict(list(zip(queries, DOCUMENTS)))
    code, _, answer = api.call("POST", "/score", {"model": "ranker", "text_1": queries, "text_2": DOCUMENTS})
    assert code == 200 and max(abs(d["score"] - float(e)) for d, e in zip(answer["data"], pairwise)) <= TOLERANCE
    code, _, one = api.call("POST", "/score", {"model": "ranker", "text_1": [QUERY], "text_2": DOCUMENTS[1]})
    assert code == 200 and abs(one["data"][0]["score"] - float(expected[1])) <= TOLERANCE
    for activation, want in ((False, logits), (True, expected)):
        code, _, answer = api.call("POST", "/score", {"model": "ranker", "text_1": QUERY, "text_2": DOCUMENTS,
                                                      "use_activation": activation})
        assert code == 200 and max(abs(d["score"] - float(e)) for d, e in zip(answer["data"], want)) <= TOLERANCE


def test_ranking_of_a_sigmoid_cross_encoder_is_its_logits(task_stack) -> None:
    """NIM's `logit` is the model's own logit (predict with the identity as activation), not its sigmoid, and the
    passages are ranked by it."""
    import torch
    from sentence_transformers import CrossEncoder

    folders, _, api = task_stack
    pairs = [(QUERY, d) for d in DOCUMENTS]
    logits = CrossEncoder(str(folders["ranker"]), device="cpu").predict(pairs, activation_fn=torch.nn.Identity())
    code, _, answer = api.call("POST", "/v1/ranking", {"model": "ranker", "query": {"text": QUERY},
                                                       "passages": [{"text": d} for d in DOCUMENTS]})
    assert code == 200, answer
    jsonschema.validate(answer, NIM_RANKING)
    assert [r["index"] for r in answer["rankings"]] == np.argsort(-logits, kind="stable").tolist()
    assert max(abs(r["logit"] - float(logits[r["index"]])) for r in answer["rankings"]) <= TOLERANCE


@pytest.mark.parametrize("body,status,words", [
    ({"text_1": ["a", "b"], "text_2": ["x", "y", "z"]}, 422, "1:1, 1:N or N:N"),
    ({"text_1": [], "text_2": ["x"]}, 422, "`text_1` must not be empty"),
    ({"text_1": "q", "text_2": []}, 422, "`text_2` must not be empty"),
    ({"text_1": "q", "text_2": "x", "model": "emb"}, 400, "serves rerank or multi-vector models"),
    ({"text_1": "q", "text_2": "x", "truncate_prompt_tokens": 8}, 422, "truncate_prompt_tokens"),
])
def test_score_refusals_are_openai_envelopes(task_stack, body, status, words) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", "/score", {"model": "ranker", **body})
    assert code == status and words in openai_error(answer), answer


@pytest.mark.parametrize("body,status,words", [
    ({"query": {"text": QUERY}, "passages": []}, 422, "`passages` must not be empty"),
    ({"query": {"text": ""}, "passages": [{"text": "a"}]}, 422, "empty string"),
    ({"query": {"text": QUERY}, "passages": [{"text": "a"}], "truncate": "START"}, 422, "truncate"),
    ({"query": {"text": QUERY}, "passages": [{"text": "a"}], "model": "sentiment"}, 400, "serves rerank or multi-vector models"),
    ({"query": {"text": QUERY}, "passages": [{"text": "a"}], "model": "nope"}, 404, "does not exist"),
])
def test_ranking_refusals_are_nim_envelopes(task_stack, body, status, words) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", "/v1/ranking", {"model": "ranker", **body})
    assert code == status and words in nim_error(answer), answer


# -- an LLM reranker whose graph returns the raw yes - no logit ----------------------------------------------------
@pytest.fixture(scope="module")
def logit_reranker(local_options, tmp_path_factory):
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    base = tmp_path_factory.mktemp("api-logits")
    folder = model_zoo.build("qwen3-llm-reranker-prompt", base / "zoo")
    repo = generate(GenerateOptions(model=str(folder), name="llm", output=str(base / "repo")))
    with api_over_triton(local_options(repo, base / "run")) as (_, api):
        yield folder, api


def test_ranking_and_score_of_an_llm_reranker_are_its_logits(logit_reranker) -> None:
    from sentence_transformers import CrossEncoder

    folder, api = logit_reranker
    expected = CrossEncoder(str(folder), device="cpu").predict([(QUERY, d) for d in DOCUMENTS])
    assert (expected < 0).any() or (expected > 1).any()  # raw logits, not probabilities
    order = np.argsort(-expected, kind="stable").tolist()
    code, _, answer = api.call("POST", "/v1/ranking", {"model": "llm", "query": {"text": QUERY},
                                                       "passages": [{"text": d} for d in DOCUMENTS], "truncate": "END"})
    assert code == 200 and [r["index"] for r in answer["rankings"]] == order, answer
    jsonschema.validate(answer, NIM_RANKING)
    assert max(abs(r["logit"] - float(expected[r["index"]])) for r in answer["rankings"]) <= TOLERANCE
    assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] > 0
    code, _, scored = api.call("POST", "/score", {"text_1": QUERY, "text_2": DOCUMENTS, "use_activation": False})
    assert code == 200 and max(abs(d["score"] - float(e)) for d, e in zip(scored["data"], expected)) <= TOLERANCE
    # NIM's default truncate is NONE: a pair longer than the model reads is refused, END cuts it.
    code, _, refused = api.call("POST", "/v1/ranking", {"query": {"text": QUERY}, "passages": [{"text": LONG}]})
    assert code == 400 and "truncate is NONE" in nim_error(refused)
    cut = CrossEncoder(str(folder), device="cpu").predict([(QUERY, LONG)])
    code, _, answer = api.call("POST", "/v1/ranking", {"query": {"text": QUERY}, "passages": [{"text": LONG}],
                                                       "truncate": "END"})
    assert code == 200 and abs(answer["rankings"][0]["logit"] - float(cut[0])) <= TOLERANCE


# -- text-embeddings-inference: /similarity, /embed_all, /decode ----------------------------------------------------
def test_similarity_is_the_cosine_of_sentence_transformers_vectors(task_stack) -> None:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.util import cos_sim

    folders, _, api = task_stack
    vectors = SentenceTransformer(str(folders["emb"]), device="cpu").encode([QUERY, *DOCUMENTS])
    expected = cos_sim(vectors[:1], vectors[1:]).numpy().reshape(-1)
    code, _, similarities = api.call("POST", "/similarity", {"inputs": {"source_sentence": QUERY,
                                                                         "sentences": DOCUMENTS}})
    assert code == 200 and len(similarities) == len(DOCUMENTS)
    jsonschema.validate(similarities, TEI_SIMILARITY)
    assert max(abs(a - float(b)) for a, b in zip(similarities, expected)) <= TOLERANCE
    code, _, same = api.call("POST", "/similarity", {"inputs": {"source_sentence": QUERY, "sentences": [QUERY]},
                                                     "parameters": {"truncate": True}, "model": "emb"})
    assert code == 200 and abs(same[0] - 1.0) <= TOLERANCE


@pytest.mark.parametrize("route,body,status,words", [
    ("/similarity", {"inputs": {"source_sentence": QUERY, "sentences": []}}, 422, "must not be empty"),
    ("/similarity", {"inputs": {"source_sentence": "", "sentences": ["a"]}}, 422, "empty string"),
    ("/similarity", {"inputs": {"source_sentence": QUERY, "sentences": ["a"]}, "model": "ranker"}, 400,
     "serves embedding or image-text models"),
    ("/similarity", {"inputs": {"source_sentence": QUERY, "sentences": ["a"]},
                     "parameters": {"truncation_direction": "middle"}}, 422, "truncation_direction"),
    ("/similarity", {"inputs": {"source_sentence": QUERY, "sentences": ["a"]},
                     "parameters": {"prompt_name": "query"}}, 422, "not declared"),
    ("/similarity", {"inputs": {"source_sentence": QUERY, "sentences": ["a"]},
                     "parameters": {"truncate": False}}, 200, ""),
    ("/embed_all", {"inputs": ["a"], "model": "emb"}, 422, "returns one vector per text"),
    ("/embed_all", {"inputs": [], "model": "emb"}, 422, "must not be empty"),
    ("/decode", {"ids": [1, 10 ** 9], "model": "emb"}, 422, "not in emb's vocabulary"),
    ("/decode", {"ids": [-3], "model": "emb"}, 422, "ids"),
    ("/decode", {"ids": [[1], [2]]}, 400, "name one with `model`"),
    ("/decode", {"ids": [[]] * 17, "model": "emb"}, 413, "limit of 16"),
])
def test_tei_refusals_are_tei_envelopes(task_stack, route, body, status, words) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", route, body)
    assert code == status, answer
    if status != 200:
        assert words in tei_error(answer), answer


def test_decode_is_the_tokenizers_decode_of_tokenize(task_stack) -> None:
    """As text-embeddings-inference decodes: the tokenizer's own decode, without transformers' clean-up of
    spaces; the model's tokenizer as transformers loads it (which marks its special tokens) is the reference."""
    from transformers import AutoTokenizer

    folders, _, api = task_stack
    texts = ["Triton serves raw strings.", "Ünïcödé café, naïve"]
    for name in ("emb", "ranker"):
        code, _, tokens = api.call("POST", "/tokenize", {"inputs": texts, "model": name})
        ids = [[t["id"] for t in row] for row in tokens]
        library = AutoTokenizer.from_pretrained(str(folders[name]))
        assert code == 200 and ids == library(texts)["input_ids"]
        answers = {}
        for skip in (True, False):
            code, _, answers[skip] = api.call("POST", "/decode", {"ids": ids, "model": name,
                                                                  "skip_special_tokens": skip})
            assert code == 200 and answers[skip] == [
                library.decode(row, skip_special_tokens=skip, clean_up_tokenization_spaces=False) for row in ids]
        assert answers[True] != answers[False] and api.call("POST", "/decode", {"ids": ids, "model": name})[2] == \
            answers[True]  # TEI's default skips the special tokens
        jsonschema.validate(answers[True], TEI_DECODE)
        code, _, one = api.call("POST", "/decode", {"ids": ids[0], "model": name})  # one list: one text
        assert code == 200 and one == answers[True][:1]


# -- vLLM's /classify ------------------------------------------------------------------------------------------------
def test_classify_equals_the_text_classification_pipeline(task_stack) -> None:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    folders, _, api = task_stack
    texts = ["a great film", "Ünïcödé café"]
    folder = str(folders["sentiment"])
    expected = pipeline("text-classification", model=folder, device="cpu")(texts, top_k=None)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    code, _, answer = api.call("POST", "/classify", {"model": "sentiment", "input": texts})
    assert code == 200 and answer["usage"]["prompt_tokens"] > 0, answer
    jsonschema.validate(answer, VLLM_CLASSIFY)
    for row, want in zip(answer["data"], expected):
        by_label = {w["label"]: w["score"] for w in want}
        assert row["num_classes"] == len(labels) and row["label"] == want[0]["label"]  # the best label
        assert max(abs(p - by_label[label]) for p, label in zip(row["probs"], labels)) <= TOLERANCE  # label order
    with torch.no_grad():
        logits = model(**AutoTokenizer.from_pretrained(folder)(texts[:1], return_tensors="pt")).logits[0].numpy()
    code, _, raw = api.call("POST", "/classify", {"input": texts[0], "use_activation": False})
    assert code == 200 and np.allclose(raw["data"][0]["probs"], logits, atol=TOLERANCE)


@pytest.mark.parametrize("body,status,words", [
    ({"input": []}, 422, "must not be empty"),
    ({"input": "x", "model": "ranker"}, 400, "serves classification models"),
    ({"input": [[1, 2]]}, 422, "token ids"),
    ({"input": "x", "truncate_prompt_tokens": 8}, 422, "truncate_prompt_tokens"),
])
def test_classify_refusals_are_openai_envelopes(task_stack, body, status, words) -> None:
    _, _, api = task_stack
    code, _, answer = api.call("POST", "/classify", body)
    assert code == status and words in openai_error(answer), answer
