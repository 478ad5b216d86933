"""The routes' pure parts: vLLM's pairing of text_1 and text_2, text-embeddings-inference's cosine, the request
bodies' parsing, each family's error envelope, and the route table against the routes the app registers."""

from __future__ import annotations

import base64

import numpy as np
import pytest
from pydantic import ValidationError

from tritonize.api import schemas as s
from tritonize.api.app import envelope
from tritonize.api.errors import ApiError, invalid
from tritonize.api.openapi import request_components
from tritonize.api.routes import paths, routers
from tritonize.api.routes.parameters import texts_of
from tritonize.api.routes.score import score_pairs
from tritonize.api.task_routes import task_routes
from tritonize.tasks.embedding import bodies as embedding_bodies
from tritonize.tasks.embedding.api import cosines


@pytest.mark.parametrize("text_1,text_2,pairs", [
    ("q", "d", [("q", "d")]),
    ("q", ["a", "b"], [("q", "a"), ("q", "b")]),
    (["q"], ["a", "b"], [("q", "a"), ("q", "b")]),
    (["q1", "q2"], ["a", "b"], [("q1", "a"), ("q2", "b")]),
])
def test_score_pairs_one_to_many_and_pairwise(text_1, text_2, pairs) -> None:
    assert score_pairs(s.ScoreRequest(text_1=text_1, text_2=text_2), 16) == pairs


@pytest.mark.parametrize("first,second", [("queries", "documents"), ("data_1", "data_2")])
def test_score_pairs_read_vllms_newer_names(first: str, second: str) -> None:
    body = s.ScoreRequest(**{first: ["q1", "q2"], second: ["a", "b"]})
    assert score_pairs(body, 16) == [("q1", "a"), ("q2", "b")]


@pytest.mark.parametrize("fields", [{}, {"text_1": "q"}, {"queries": "q", "text_2": ["a"]},
                                    {"text_1": "q", "text_2": "a", "queries": "q", "documents": "a"}])
def test_score_pairs_need_one_pair_of_names(fields: dict) -> None:
    with pytest.raises(ApiError) as refused:
        score_pairs(s.ScoreRequest(**fields), 16)
    assert refused.value.status == 422 and "one pair of names" in refused.value.message


@pytest.mark.parametrize("text_1,text_2,status,words", [
    (["q1", "q2"], ["a", "b", "c"], 422, "1:1, 1:N or N:N"),
    (["q1", "q2"], "a", 422, "1:1, 1:N or N:N"),  # N:1 is not one of vLLM's shapes
    ([], ["a"], 422, "`text_1` must not be empty"),
    ("q", [], 422, "`text_2` must not be empty"),
    ("q", ["a", ""], 422, "empty string"),
    ("q", ["a"] * 17, 413, "limit of 16"),
])
def test_score_pairs_refuses_what_vllm_refuses(text_1, text_2, status, words) -> None:
    with pytest.raises(ApiError) as refused:
        score_pairs(s.ScoreRequest(text_1=text_1, text_2=text_2), 16)
    assert refused.value.status == status and words in refused.value.message


def test_cosines_are_sentence_transformers_cos_sim() -> None:
    from sentence_transformers.util import cos_sim

    rng = np.random.default_rng(0)
    source, others = rng.normal(size=8).astype(np.float32), rng.normal(size=(5, 8)).astype(np.float32)
    expected = cos_sim(source, others).numpy().reshape(-1)
    assert np.allclose(cosines(source, others), expected, atol=1e-6)
    assert np.allclose(cosines(source, others * 3), expected, atol=1e-6)  # a scale, as normalising, changes nothing
    assert cosines(source, np.zeros((1, 8), np.float32)).tolist() == [0.0]


def test_request_bodies_parse_as_their_clients_send_them() -> None:
    assert s.TEIDecodeRequest.model_validate({"ids": [101, 7]}).ids == [101, 7]
    assert s.TEIDecodeRequest.model_validate({"ids": [[101], [7, 8]]}).ids == [[101], [7, 8]]
    assert s.TEIDecodeRequest.model_validate({"ids": [1]}).skip_special_tokens is True  # TEI's default
    with pytest.raises(ValidationError):
        s.TEIDecodeRequest.model_validate({"ids": [-1]})
    ranking = s.NIMRankingRequest.model_validate({"query": {"text": "q"}, "passages": [{"text": "a"}]})
    assert ranking.truncate == "NONE"  # NIM's default: a pair longer than the model reads is refused
    with pytest.raises(ValidationError):
        s.NIMRankingRequest.model_validate({"query": {"text": "q"}, "passages": [{"text": "a"}], "truncate": "START"})
    assert s.ScoreRequest.model_validate({"text_1": "q", "text_2": ["a"], "truncate_prompt_tokens": -1})
    with pytest.raises(ValidationError):  # a cut shorter than the model's max length is not what the step does
        s.ScoreRequest.model_validate({"text_1": "q", "text_2": "a", "truncate_prompt_tokens": 8})
    similarity = embedding_bodies.TEISimilarityRequest.model_validate(
        {"inputs": {"source_sentence": "a", "sentences": ["b"]}})
    assert similarity.parameters is None


@pytest.mark.parametrize("body,field", [
    (b'{"inputs": "a", "truncate": 0}', "truncate"),  # a number is not a boolean
    (b'{"inputs": "a", "normalize": "true"}', "normalize"),  # nor is a string
    (b'{"inputs": "a", "dimensions": "16"}', "dimensions"),  # a string is not a number
    (b'{"inputs": "a", "dimensions": 16.5}', "dimensions"),
    (b'{"inputs": 5}', "inputs"),  # a number is not a text
])
def test_request_bodies_are_strict(body: bytes, field: str) -> None:
    """What the document's types refuse, the body refuses: no value is coerced into another type."""
    with pytest.raises(ValidationError) as refused:
        embedding_bodies.TEIEmbedRequest.model_validate_json(body)
    assert {e["loc"][0] for e in refused.value.errors()} == {field}
    assert embedding_bodies.TEIEmbedRequest.model_validate_json(b'{"inputs": "a", "truncate": false}').truncate is False


def test_every_post_route_is_answered_without_fastapis_request_path() -> None:
    """api/dispatch.py answers each POST route from its typed body and handler: none falls back unseen."""
    from tritonize.api import dispatch

    routes = [route for router in routers() for route in router.routes]
    posts = {route.path for route in routes if "POST" in getattr(route, "methods", ())}
    found = dispatch.endpoints(routes)
    assert set(found) == posts and {"/v1/embeddings", "/v2/embed", "/embed", "/v1/rerank", "/decode"} <= posts
    assert found["/v1/embeddings"].body is embedding_bodies.EmbeddingRequest


def test_each_family_answers_in_its_envelope() -> None:
    error = invalid("passages must not be empty", "passages")
    assert envelope("/v1/ranking", error) == {"object": "error", "message": "passages must not be empty",
                                              "detail": {"param": "passages"}, "type": "invalid_request_error"}
    assert envelope("/similarity", error) == {"error": "passages must not be empty", "error_type": "Validation"}
    assert envelope("/score", error)["error"]["param"] == "passages"
    assert envelope("/classify", ApiError(503, "down"))["error"]["type"] == "server_error"
    assert paths("nim") == {"/v1/ranking"} and {"/similarity", "/embed_all", "/decode"} <= paths("tei")
    assert paths("cohere") == {"/v2/embed"} and {"/v1/rerank", "/v1/entities", "/classify"} <= paths("openai")


def test_the_route_table_names_only_routes_the_app_serves() -> None:
    served = {route.path for router in routers() for route in router.routes}
    assert {p for r in task_routes() for p in r.paths} <= served
    by_task = {r.contract.name: r.paths for r in task_routes()}
    assert {"/v1/ranking", "/score", "/v1/score"} <= set(by_task["rerank"])
    assert "/classify" in by_task["classification"] and "/similarity" in by_task["embedding"]


def test_the_document_narrows_fields_one_level_down() -> None:
    """`prompt_name` of /similarity sits in `parameters`: its component is narrowed with the body's."""
    assert request_components(("/similarity",)) == {"TEISimilarityRequest", "TEISimilarityInput",
                                                    "TEISimilarityParameters"}


def test_an_image_is_read_from_a_data_uri_or_base64() -> None:
    """A URL is read as a RemoteImage, refused or fetched later (test_remote_images.py)."""
    from tritonize.api.routes.parameters import image_of

    data = b"\x89PNG\r\n\x1a\n some bytes"
    encoded = base64.b64encode(data).decode()
    assert image_of(f"data:image/png;base64,{encoded}", "p") == data
    assert image_of(f"DATA:image/jpeg;name=a.jpg;base64,{encoded}", "p") == data  # the media type is not trusted
    assert image_of(encoded, "p") == data  # Jina's bare base64
    refusals = [("file:///etc/passwd", 400, "a file: URI"), ("data:image/png,rawbytes", 422, "without base64"),
                ("data:image/png;base64,%%%", 422, "not valid base64"), ("data:image/png;base64,", 422, "no bytes"),
                ("", 422, "data URI")]
    for value, status, said in refusals:
        with pytest.raises(ApiError) as refused:
            image_of(value, "input[0].image")
        assert refused.value.status == status and said in refused.value.message, value
        assert refused.value.param == "input[0].image"


def test_embedding_bodies_take_each_image_form() -> None:
    jina = embedding_bodies.EmbeddingRequest.model_validate({"input": [{"image": "AAAA"}, {"text": "a"}, "b"]})
    assert isinstance(jina.input[0], embedding_bodies.InputItem) and jina.input[2] == "b"
    assert embedding_bodies.EmbeddingRequest.model_validate({"input": ["a", "b"]}).input == ["a", "b"]
    vllm = embedding_bodies.EmbeddingRequest.model_validate(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]})
    assert vllm.input is None and vllm.messages[0].content[0].image_url.url == "data:,"
    cohere = embedding_bodies.CohereEmbedRequest.model_validate(
        {"inputs": [{"content": [{"type": "text", "text": "a"}]}], "input_type": "image"})
    assert cohere.texts is None and cohere.inputs[0].content[0].text == "a"


def test_interleaved_answers_keep_the_requests_order() -> None:
    from tritonize.tasks.embedding.api import interleaved

    images = {"embedding": np.array([[1.0], [3.0]]), "token_count": np.array([[0], [0]])}
    texts = {"embedding": np.array([[2.0]]), "token_count": np.array([[5]])}
    merged = interleaved(3, [([0, 2], images), ([1], texts)])
    assert merged["embedding"].reshape(-1).tolist() == [1.0, 2.0, 3.0]
    assert merged["token_count"].reshape(-1).tolist() == [0, 5, 0]


@pytest.mark.parametrize("value,status,words", [
    ([], 422, "must not be empty"),
    (["a", 7], 422, "holds token ids"),
    (["a", ""], 422, "holds an empty string"),
    (["a", " \t\ufeff"], 422, "holds a blank string"),
    (["a"] * 5, 413, "holds 5 texts, over this server's limit of 4"),
])
def test_texts_are_refused_for_what_they_hold(value, status: int, words: str) -> None:
    with pytest.raises(ApiError) as refused:
        texts_of(value, "input", 4)
    assert refused.value.status == status and words in refused.value.message


@pytest.mark.parametrize("value,texts", [("one", ["one"]),
                                         (["a", " b", "\ufeffc", "\td"], ["a", " b", "\ufeffc", "\td"])])
def test_texts_that_start_with_white_space_are_texts(value, texts: list[str]) -> None:
    assert texts_of(value, "input", 4) == texts
