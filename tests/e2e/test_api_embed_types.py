"""Typed and quantized embeddings through the API on a real local Triton, called by the real cohere and openai
SDKs: every embedding type equals sentence-transformers' quantize_embeddings over the ensemble's float vectors
with the ranges the repository recorded, bit for bit; input types select the prompts a model declares; bad
inputs get Cohere's envelope and the API keeps serving. Long texts: cut at the start as the library's tokenizer
cuts them with truncation_side left, or embedded in windows (the API runs with --chunk-overlap 8) pooled as the
same arithmetic pools the library's embeddings of those windows.

Two embedders in one repository: `plain` declares no prompts and was calibrated on a file of texts; `prompted`
declares a query and a document prompt and Matryoshka sizes 32/16/8 (neither the session's `task_stack` nor the
`served` embedder declares prompts).
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from sentence_transformers.util import quantize_embeddings

from support.api import KEY, api_over_triton
from tritonize.spec import QUANTIZATION_FILE, repo_paths
from tritonize.tasks.embedding import truncate_embeddings
from tritonize.tasks.embedding.quantization import Calibration

LONG = " ".join(f"part {i} of a long document that the model reads only in part" for i in range(24))
OVERLAP = 8  # the stack's --chunk-overlap
TEXTS = ["Triton serves raw strings.", "A man is eating food.", "Ünïcödé café, naïve", "x"]
PROMPTS = {"query": "query: ", "document": "passage: "}
TYPES = ("float", "int8", "uint8", "binary", "ubinary", "base64")
CALIBRATION = [f"calibration text {i}: the server batches requests of the same length" for i in range(24)]


@pytest.fixture(scope="module")
def stack(local_triton, local_options, tmp_path_factory):
    from support.tiny_models import build_embedding_model
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    base = tmp_path_factory.mktemp("embed-types")
    plain = build_embedding_model(base / "plain")
    prompted = build_embedding_model(base / "prompted", seed=1)
    (prompted / "config_sentence_transformers.json").write_text(json.dumps({"prompts": PROMPTS}))
    (base / "calibration.txt").write_text("\n".join(CALIBRATION) + "\n")
    repo = base / "repo"
    # `plain` keeps the Python tokenizer step, which cuts at a text's start and into windows; `prompted` is
    # generate's default, tokenized in graphs
    generate(GenerateOptions(model=str(plain), name="plain", output=str(repo), tokenizer="python",
                             calibration=str(base / "calibration.txt")))
    generate(GenerateOptions(model=str(prompted), name="prompted", output=str(repo), add=True,
                             matryoshka_dims=[32, 16, 8]))
    options = local_options(repo, base / "run")
    with api_over_triton(options, "--max-client-batch-size", "8", "--chunk-overlap", str(OVERLAP),
                         key=KEY) as (endpoints, api):
        yield repo, endpoints, api


def ensemble(endpoints, name: str, texts: list[str], prompt: str = "") -> np.ndarray:
    from tritonize.client import TextClient

    with TextClient(endpoints.grpc, name, protocol="grpc") as client:
        return client.embed(texts, prompt=prompt)


def recorded(repo, name: str) -> Calibration:
    found = Calibration.read(repo_paths(repo, name)["model"] / "1" / QUANTIZATION_FILE)
    assert found is not None
    return found


def expected_of(vectors: np.ndarray, kind: str, calibration: Calibration):
    """What each embedding type should be: the library's quantization of the ensemble's float32 vectors."""
    if kind == "float":
        return vectors
    if kind == "base64":
        return [base64.b64encode(v.astype("<f4").tobytes()).decode("ascii") for v in vectors]
    return quantize_embeddings(vectors, kind, ranges=calibration.of_size(vectors.shape[1]))


def cohere_client(api):
    import cohere

    return cohere.ClientV2(base_url=api.url, api_key=KEY)


def assert_type_equal(got, expected, kind: str) -> None:
    if kind == "base64":
        assert got == expected
    elif kind == "float":
        np.testing.assert_array_equal(np.array(got, dtype=np.float32), expected)  # float32 round-trips exactly
    else:
        assert np.array(got).tolist() == expected.tolist()  # the same integers, value by value


@pytest.mark.parametrize("kinds", [[k] for k in TYPES] + [list(TYPES), ["ubinary", "int8", "float"]])
def test_cohere_sdk_gets_each_type_as_quantize_embeddings_computes_it(stack, kinds) -> None:
    repo, endpoints, api = stack
    raw = cohere_client(api).with_raw_response.embed(model="plain", texts=TEXTS, input_type="search_document",
                                                     embedding_types=kinds)
    answer = raw.data
    vectors = ensemble(endpoints, "plain", TEXTS)  # no prompts: every input type embeds the text as it is
    calibration = recorded(repo, "plain")
    assert calibration.source == "calibration.txt" and calibration.texts == len(CALIBRATION)
    assert answer.response_type == "embeddings_by_type" and answer.texts == TEXTS and answer.id
    assert answer.meta.api_version.version == "2" and answer.meta.billed_units.input_tokens > len(TEXTS)
    given = answer.embeddings.model_dump(by_alias=True, exclude_none=True)
    assert sorted(given) == sorted(kinds)
    for kind in kinds:
        assert_type_equal(given[kind], expected_of(vectors, kind, calibration), kind)
    ranged = {"int8", "uint8"} & set(kinds)
    assert raw.headers.get("quantization-ranges") == (calibration.label(32) if ranged else None)


@pytest.mark.parametrize("input_type, prompt", [("search_query", "query: "), ("search_document", "passage: ")])
@pytest.mark.parametrize("size", [32, 16, 8])
def test_input_types_select_declared_prompts_and_each_size_its_own_ranges(stack, input_type, prompt, size) -> None:
    repo, endpoints, api = stack
    raw = cohere_client(api).with_raw_response.embed(model="prompted", texts=TEXTS, input_type=input_type,
                                                     embedding_types=list(TYPES), output_dimension=size)
    full = ensemble(endpoints, "prompted", TEXTS, prompt=prompt)
    assert np.abs(full - ensemble(endpoints, "prompted", TEXTS)).max() > 1e-3  # the prompt changed the embedding
    vectors = truncate_embeddings(full, size, True) if size != 32 else full
    calibration = recorded(repo, "prompted")
    given = raw.data.embeddings.model_dump(by_alias=True, exclude_none=True)
    for kind in TYPES:
        assert_type_equal(given[kind], expected_of(vectors, kind, calibration), kind)
    assert np.array(given["int8"]).shape == (len(TEXTS), size) and np.array(given["binary"]).shape[1] == size // 8
    assert raw.headers["quantization-ranges"] == calibration.label(size)
    assert calibration.label(size).startswith(f"dim={size}; source=verification corpus; texts=16; sha256=")


@pytest.mark.parametrize("encoding", ["int8", "uint8", "binary", "ubinary"])
def test_openai_sdk_encoding_formats_are_the_quantized_bytes(stack, encoding) -> None:
    from openai import OpenAI

    repo, endpoints, api = stack
    client = OpenAI(base_url=api.url + "/v1", api_key=KEY)
    raw = client.embeddings.with_raw_response.create(model="prompted", input=TEXTS, encoding_format=encoding,
                                                     dimensions=16, extra_body={"input_type": "query"})
    answer = raw.parse()
    vectors = truncate_embeddings(ensemble(endpoints, "prompted", TEXTS, prompt="query: "), 16, True)
    expected = quantize_embeddings(vectors, encoding, ranges=recorded(repo, "prompted").of_size(16))
    got = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype=expected.dtype) for d in answer.data])
    assert got.tobytes() == expected.tobytes() and got.shape == expected.shape
    ranged = encoding in ("int8", "uint8")
    assert raw.headers.get("quantization-ranges") == (recorded(repo, "prompted").label(16) if ranged else None)
    passage = client.embeddings.create(model="prompted", input=TEXTS, encoding_format="float",
                                       extra_body={"input_type": "passage"})  # NIM's passage: the document prompt
    np.testing.assert_array_equal(np.array([d.embedding for d in passage.data], dtype=np.float32),
                                  ensemble(endpoints, "prompted", TEXTS, prompt="passage: "))


def test_a_model_without_prompts_embeds_every_input_type_as_the_text(stack) -> None:
    _, endpoints, api = stack
    client = cohere_client(api)
    bare = ensemble(endpoints, "plain", TEXTS)
    for input_type in ("search_query", "search_document", "classification", "clustering"):
        answer = client.embed(model="plain", texts=TEXTS, input_type=input_type, embedding_types=["float"])
        np.testing.assert_array_equal(np.array(answer.embeddings.float_, dtype=np.float32), bare)


def test_cohere_refusals_are_in_cohere_envelope_and_the_api_keeps_serving(stack) -> None:
    from cohere.core.api_error import ApiError
    from cohere.errors import BadRequestError, NotFoundError, UnprocessableEntityError

    _, _, api = stack
    client = cohere_client(api)
    cases = [
        (BadRequestError, dict(model="prompted", input_type="classification"), "input_type classification",
         "declares only document, query"),
        (BadRequestError, dict(model="prompted", output_dimension=12), "cannot be cut to 12 values",
         "Matryoshka sizes declared: 32, 16, 8"),
        (BadRequestError, dict(model="plain", output_dimension=16), "cannot be cut to 16 values", "declared: none"),
        (BadRequestError, dict(model="plain", truncate="START", enable_chunked_processing=True),
         "truncate START and enable_chunked_processing", "send one"),
        (BadRequestError, dict(model="plain", max_tokens=8), "max_tokens 8 is not served", "first 64 tokens"),
        (BadRequestError, dict(model="plain", images=["data:image/png;base64,AAAA"]), "embeds texts only", ""),
        (NotFoundError, dict(model="nope"), "the model 'nope' does not exist", "served: plain, prompted"),
        (UnprocessableEntityError, dict(model="plain", embedding_types=["int4"]), "embedding_types.0", ""),
        (UnprocessableEntityError, dict(model="plain", embedding_types=[]), "`embedding_types` must not be empty", ""),
        (UnprocessableEntityError, dict(model="plain", texts=[]), "`texts` must not be empty", ""),
        (UnprocessableEntityError, dict(model="plain", texts=["a", ""]), "`texts` holds an empty string", ""),
        (UnprocessableEntityError, dict(model="plain", input_type="image"), "input_type", ""),
        (ApiError, dict(model="plain", texts=["word " * 200], truncate="NONE"), "longer than plain reads", ""),
        (ApiError, dict(model="plain", texts=["a"] * 9), "over this server's limit of 8", ""),
    ]
    for error, call, said, also in cases:
        kwargs = {"texts": TEXTS, "input_type": "search_query", "embedding_types": ["int8"], **call}
        if "enable_chunked_processing" in kwargs:  # no argument of the SDK's: sent as its extra body
            kwargs["request_options"] = {"additional_body_parameters": {
                "enable_chunked_processing": kwargs.pop("enable_chunked_processing")}}
        with pytest.raises(error) as raised:
            client.embed(**kwargs)
        body = raised.value.body
        assert set(body) == {"id", "message"} and said in body["message"] and also in body["message"], (call, body)
        assert raised.value.status_code in (400, 404, 413, 422), (call, raised.value.status_code)
        assert api.call("GET", "/health")[0] == 200
    long = client.embed(model="plain", texts=["word " * 200], input_type="search_query", embedding_types=["float"])
    assert len(long.embeddings.float_[0]) == 32  # END (the default): the first tokens are embedded


def test_the_document_narrows_the_new_fields_to_what_both_models_accept(stack) -> None:
    _, _, api = stack
    code, _, schema = api.call("GET", "/openapi.json")
    assert code == 200
    components = schema["components"]["schemas"]
    cohere, openai = components["CohereEmbedRequest"]["properties"], components["EmbeddingRequest"]["properties"]
    # prompted declares query and document prompts only; plain embeds every type as it is
    assert cohere["input_type"]["anyOf"][0]["enum"] == ["search_query", "search_document"]
    assert openai["input_type"]["anyOf"][0]["enum"] == ["query", "passage"]
    assert cohere["output_dimension"]["anyOf"][0]["enum"] == [32]  # plain declares no Matryoshka sizes
    assert cohere["model"]["enum"] == ["plain", "prompted"] and "model" in components["CohereEmbedRequest"]["required"]
    assert cohere["truncate"]["enum"] == ["NONE", "START", "END"]
    assert cohere["embedding_types"]["items"]["enum"] == list(TYPES)
    operation = schema["paths"]["/v2/embed"]["post"]
    assert "Quantization-Ranges" in operation["responses"]["200"]["headers"]
    assert operation["responses"]["400"]["content"]["application/json"]["schema"]["$ref"].endswith("/CohereError")


def library(repo):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(repo.parent / "plain"), device="cpu")


def test_truncate_start_embeds_a_long_texts_last_tokens_as_the_library_cuts_them(stack) -> None:
    """Cohere's and NIM's truncate START and text-embeddings-inference's truncation_direction Left: the vectors
    sentence-transformers computes with its tokenizer's truncation_side left; a short text as it always is."""
    from openai import BadRequestError, OpenAI

    repo, endpoints, api = stack
    model = library(repo)
    texts = [LONG, TEXTS[0]]
    end = model.encode(texts)
    model.tokenizer.truncation_side = "left"
    start = model.encode(texts)
    assert np.abs(start[0] - end[0]).max() > 1e-3  # the two cuts embed different tokens
    cohere = cohere_client(api).embed(model="plain", texts=texts, truncate="START", input_type="search_document",
                                      embedding_types=["float"])
    client = OpenAI(base_url=api.url + "/v1", api_key=KEY)
    nim = client.embeddings.create(model="plain", input=texts, extra_body={"truncate": "START"})
    code, _, tei = api.call("POST", "/embed", {"inputs": texts, "truncation_direction": "Left", "model": "plain"})
    assert code == 200
    for got in (cohere.embeddings.float_, [d.embedding for d in nim.data], tei):
        assert np.abs(np.array(got, dtype=np.float32) - start).max() <= 1e-5
    np.testing.assert_array_equal(np.array(tei, dtype=np.float32)[1], ensemble(endpoints, "plain", texts[1:])[0])
    code, _, similarity = api.call("POST", "/similarity", {"model": "plain", "inputs": {
        "source_sentence": TEXTS[0], "sentences": [LONG]}, "parameters": {"truncation_direction": "left"}})
    assert code == 200 and abs(similarity[0] - float(start[1] @ start[0])) <= 1e-5
    with pytest.raises(BadRequestError, match="longer than plain reads .* truncate is NONE"):
        client.embeddings.create(model="plain", input=texts, extra_body={"truncate": "NONE"})


def test_chunked_processing_pools_the_windows_the_library_embeds(stack) -> None:
    """enable_chunked_processing: the text's max-length windows, OVERLAP tokens apart (transformers'
    return_overflowing_tokens with that stride), each embedded by the library, averaged by their tokens and
    normalised; the answer counts the windows, and a text of one window is served as without chunking."""
    import torch

    repo, endpoints, api = stack
    model = library(repo)
    ids = model.tokenizer(LONG, truncation=True, max_length=64, stride=OVERLAP,
                          return_overflowing_tokens=True)["input_ids"]
    assert len(ids) >= 3 and all(len(w) <= 64 for w in ids)
    with torch.no_grad():
        vectors = model(dict(model.tokenizer.pad({"input_ids": ids}, return_tensors="pt")))["sentence_embedding"]
    weights = np.array([len(w) for w in ids], dtype=np.float64)
    mean = (vectors.numpy().astype(np.float64) * weights[:, None]).sum(axis=0) / weights.sum()
    expected = mean / np.linalg.norm(mean)
    short = ensemble(endpoints, "plain", TEXTS[:1])[0]
    code, _, openai = api.call("POST", "/v1/embeddings", {"model": "plain", "input": [LONG, TEXTS[0]],
                                                          "enable_chunked_processing": True})
    assert code == 200, openai
    got = np.array([d["embedding"] for d in openai["data"]], dtype=np.float32)
    assert np.abs(got[0] - expected).max() <= 1e-5 and abs(np.linalg.norm(got[0]) - 1) <= 1e-6
    np.testing.assert_array_equal(got[1], short)
    short_tokens = len(model.tokenizer(TEXTS[0])["input_ids"])
    assert openai["usage"] == {"prompt_tokens": int(weights.sum()) + short_tokens,
                               "total_tokens": int(weights.sum()) + short_tokens, "chunks": len(ids) + 1}
    code, _, cohere = api.call("POST", "/v2/embed", {"model": "plain", "texts": [LONG], "embedding_types": ["float"],
                                                     "enable_chunked_processing": True})
    assert code == 200 and cohere["meta"]["chunks"] == len(ids)
    assert np.abs(np.array(cohere["embeddings"]["float"][0]) - expected).max() <= 1e-5
    code, _, plain = api.call("POST", "/v1/embeddings", {"model": "plain", "input": [LONG]})  # the server's default
    assert code == 200 and "chunks" not in plain["usage"]
    assert np.abs(np.array(plain["data"][0]["embedding"]) - model.encode([LONG])[0]).max() <= 1e-5
