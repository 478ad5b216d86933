"""The HTTP API on the real local Triton, called by the clients retrieval stacks ship: the openai SDK,
LangChain's OpenAIEmbeddings, and text-embeddings-inference's request and response shapes.

Embeddings equal the ensemble's over gRPC (floats and base64 bit for bit) and sentence-transformers' within
the verification tolerance. Every bad input gets its status and its family's envelope, and the API keeps
serving.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import numpy as np
import pytest

from support.api import KEY, Api, matryoshka_repo, served, start_api, stop  # noqa: F401 - fixtures test_api_schema.py shares

TEXTS = ["Triton serves raw strings.", "A man is eating food.", "Ünïcödé café, naïve", "x"]

# text-embeddings-inference's published response shapes (its docs/openapi.json, components), as JSON Schema.
TEI_ERROR = {"type": "object", "required": ["error", "error_type"],
             "properties": {"error": {"type": "string"},
                            "error_type": {"enum": ["Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer"]}}}
TEI_EMBED = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}
TEI_TOKENIZE = {"type": "array", "items": {"type": "array", "items": {
    "type": "object", "required": ["id", "text", "special"],
    "properties": {"id": {"type": "integer", "minimum": 0}, "text": {"type": "string"}, "special": {"type": "boolean"},
                   "start": {"type": ["integer", "null"]}, "stop": {"type": ["integer", "null"]}}}}}
TEI_INFO = {"type": "object", "required": ["model_id", "model_dtype", "model_type", "max_concurrent_requests",
                                           "max_input_length", "max_batch_tokens", "max_client_batch_size",
                                           "auto_truncate", "tokenization_workers", "version"],
            "properties": {"model_type": {"type": "object", "minProperties": 1, "maxProperties": 1}}}
OPENAI_ERROR = {"type": "object", "required": ["error"], "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"]}}}


def ensemble(endpoints, name: str, texts: list[str]) -> np.ndarray:
    from tritonize.client import TextClient

    with TextClient(endpoints.grpc, name, protocol="grpc") as client:
        return client.embed(texts)


def test_openai_sdk_floats_and_base64_are_the_ensembles(served) -> None:
    from openai import OpenAI
    from sentence_transformers import SentenceTransformer

    repo, endpoints, api = served
    client = OpenAI(base_url=api.url + "/v1", api_key=KEY)
    floats = client.embeddings.create(model=repo.name, input=TEXTS, encoding_format="float")
    b64 = client.embeddings.create(model=repo.name, input=TEXTS, encoding_format="base64")
    expected = ensemble(endpoints, repo.name, TEXTS)
    got = np.array([d.embedding for d in floats.data], dtype=np.float32)
    assert [d.index for d in floats.data] == list(range(len(TEXTS))) and floats.model == repo.name
    np.testing.assert_array_equal(got, expected)  # float32 written shortest round-trip: read back exactly
    packed = np.stack([np.frombuffer(base64.b64decode(d.embedding), dtype="<f4") for d in b64.data])
    np.testing.assert_array_equal(packed, expected)  # little-endian float32, bit for bit
    default = client.embeddings.create(model=repo.name, input=TEXTS)  # the SDK asks for base64 and decodes it
    np.testing.assert_array_equal(np.array([d.embedding for d in default.data], dtype=np.float32), expected)
    reference = SentenceTransformer(str(repo.source), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert np.abs(got - reference).max() <= 1e-5
    one = client.embeddings.create(model=repo.name, input=TEXTS[0])
    np.testing.assert_array_equal(np.array(one.data[0].embedding, dtype=np.float32),
                                  ensemble(endpoints, repo.name, TEXTS[:1])[0])


def test_usage_counts_the_tokens_the_served_step_read(served) -> None:
    """prompt_tokens is the tokenizer step's own count (special tokens included), not a second tokenization."""
    from tokenizers import Tokenizer

    from tritonize.api.catalog import Catalog

    repo, _, api = served
    long = " ".join(["word"] * 300)
    code, _, answer = api.call("POST", "/v1/embeddings", {"model": repo.name, "input": [*TEXTS, long]})
    tokenizer = Tokenizer.from_file(str(Catalog.read(repo.repository).models[0].tokenizer_file))
    tokenizer.no_padding()
    tokenizer.enable_truncation(64)
    expected = sum(len(tokenizer.encode(t).ids) for t in [*TEXTS, long])
    assert code == 200 and answer["usage"] == {"prompt_tokens": expected, "total_tokens": expected}
    code, _, refused = api.call("POST", "/embed", {"inputs": ["short", long], "truncate": False})
    assert code == 413 and refused["error_type"] == "Validation" and "[1]" in refused["error"]
    assert api.call("POST", "/embed", {"inputs": ["short", long]})[0] == 200  # truncated by default


@pytest.mark.parametrize("dimensions", [16, 8])
def test_dimensions_cut_a_matryoshka_model_as_sentence_transformers_does(served, dimensions: int) -> None:
    from openai import OpenAI
    from sentence_transformers import SentenceTransformer

    repo, endpoints, api = served
    got = OpenAI(base_url=api.url + "/v1", api_key=KEY).embeddings.create(model=repo.name, input=TEXTS,
                                                                           dimensions=dimensions)
    vectors = np.array([d.embedding for d in got.data], dtype=np.float32)
    reference = SentenceTransformer(str(repo.source), device="cpu", truncate_dim=dimensions).encode(
        TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert vectors.shape == (len(TEXTS), dimensions)
    assert np.abs(vectors - reference).max() <= 1e-5
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    code, _, tei = api.call("POST", "/embed", {"inputs": TEXTS, "dimensions": dimensions})
    assert code == 200 and np.abs(np.array(tei, dtype=np.float32) - vectors).max() == 0


def test_langchain_openai_embeddings(served) -> None:
    from langchain_openai import OpenAIEmbeddings

    repo, endpoints, api = served
    lc = OpenAIEmbeddings(model=repo.name, base_url=api.url + "/v1", api_key=KEY, check_embedding_ctx_length=False)
    docs = np.array(lc.embed_documents(TEXTS), dtype=np.float32)
    query = np.array(lc.embed_query(TEXTS[1]), dtype=np.float32)
    expected = ensemble(endpoints, repo.name, TEXTS)
    assert np.abs(docs - expected).max() <= 1e-6 and np.abs(query - expected[1]).max() <= 1e-6


def test_models_route_lists_what_is_served(served) -> None:
    from openai import OpenAI

    repo, _, api = served
    listed = OpenAI(base_url=api.url + "/v1", api_key=KEY).models.list()
    assert [m.id for m in listed.data] == [repo.name]


def test_tei_routes_answer_in_teis_shapes(served) -> None:
    repo, endpoints, api = served
    code, _, vectors = api.call("POST", "/embed", {"inputs": TEXTS})
    assert code == 200
    jsonschema.validate(vectors, TEI_EMBED)
    np.testing.assert_array_equal(np.array(vectors, dtype=np.float32), ensemble(endpoints, repo.name, TEXTS))
    code, _, single = api.call("POST", "/embed", {"inputs": TEXTS[0], "truncate": True})
    assert code == 200 and len(single) == 1
    code, _, tokens = api.call("POST", "/tokenize", {"inputs": ["hello world"]})
    assert code == 200
    jsonschema.validate(tokens, TEI_TOKENIZE)
    words = [t for t in tokens[0] if not t["special"]]
    assert [t["text"] for t in words] == ["hello", "world"] and words[1]["start"] == 6 and words[1]["stop"] == 11
    assert tokens[0][0]["special"] and tokens[0][0]["start"] is None
    code, _, info = api.call("GET", "/info")
    assert code == 200
    jsonschema.validate(info, TEI_INFO)
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["max_input_length"] == 64


@pytest.mark.parametrize("path,body,status,param", [
    ("/v1/embeddings", {"model": "nope", "input": "x"}, 404, "model"),
    ("/v1/embeddings", {"model": "MODEL", "input": [1, 2, 3]}, 422, "input"),
    ("/v1/embeddings", {"model": "MODEL", "input": [[1, 2], [3]]}, 422, "input"),
    ("/v1/embeddings", {"model": "MODEL", "input": []}, 422, "input"),
    ("/v1/embeddings", {"model": "MODEL", "input": ["a", ""]}, 422, "input"),
    ("/v1/embeddings", {"model": "MODEL", "input": [{"a": 1}]}, 422, None),
    ("/v1/embeddings", {"model": "MODEL", "input": ["a"] * 9}, 413, "input"),
    ("/v1/embeddings", {"model": "MODEL", "input": "a", "dimensions": 12}, 400, "dimensions"),
    ("/v1/embeddings", {"model": "MODEL", "input": "a", "dimensions": 0}, 400, "dimensions"),
    ("/v1/embeddings", {"model": "MODEL", "input": "a", "encoding_format": "int4"}, 422, None),
    ("/v1/rerank", {"query": "q", "documents": ["a"]}, 424, "model"),
])
def test_openai_errors_name_the_problem(served, path, body, status, param) -> None:
    repo, _, api = served
    body = {k: (repo.name if v == "MODEL" else v) for k, v in body.items()}
    code, _, answer = api.call("POST", path, body)
    assert code == status, answer
    jsonschema.validate(answer, OPENAI_ERROR)
    if param:
        assert answer["error"]["param"] == param
    assert api.call("GET", "/health")[0] == 200


@pytest.mark.parametrize("path,body,status", [
    ("/embed", {"inputs": "a", "normalize": False}, 422),
    ("/embed", {"inputs": "a", "prompt_name": "query"}, 422),
    ("/embed", {"inputs": "a", "truncation_direction": "middle"}, 422),
    ("/embed", {"inputs": [5, 6]}, 422),
    ("/embed", {"inputs": "a", "truncate": 0}, 422),  # strict: a number is not a boolean
    ("/embed", {"inputs": "a", "dimensions": "16"}, 422),  # nor a string a number
    ("/predict", {"inputs": "a"}, 424),
    ("/rerank", {"query": "q", "texts": ["a"]}, 424),
])
def test_tei_errors_use_teis_envelope(served, path, body, status) -> None:
    _, _, api = served
    code, _, answer = api.call("POST", path, body)
    assert code == status, answer
    jsonschema.validate(answer, TEI_ERROR)


def test_hostile_bodies_are_refused_and_the_api_keeps_serving(served) -> None:
    """The bodies that crash or kill Triton 2.51's HTTP server (docs/reliability.md) stop at the API."""
    _, _, api = served
    form = b"input=" + b"a" * (4 * 1024 * 1024)  # what `curl -d` sends: form-encoded, over 4 MB
    code, _, answer = api.call("POST", "/v1/embeddings", form,
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert code == 413 and "over this server's limit of 2097152 bytes" in answer["error"]["message"]
    nested = b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    code, _, answer = api.call("POST", "/v1/embeddings", nested[:2_000_000])
    assert code in (400, 422), answer
    code, _, answer = api.call("POST", "/v1/embeddings", b'{"input": "x", ', headers={"Content-Type": "application/json"})
    assert code == 422 and answer["error"]["message"] == "the body is not valid JSON"
    code, _, answer = api.call("POST", "/embed", b"a" * 100, headers={"Content-Type": "text/plain"})
    assert code == 422 and answer["error_type"] == "Validation"
    code, _, answer = api.call("GET", "/no/such/route")
    assert code == 404 and answer["error"]["message"] == "no route GET /no/such/route"
    assert api.call("GET", "/health")[0] == 200


def test_a_key_guards_every_route_but_health(served) -> None:
    repo, _, api = served
    body = {"model": repo.name, "input": "x"}
    for key in (None, "wrong-key"):
        code, _, answer = api.call("POST", "/v1/embeddings", body, key=key)
        assert code == 401 and answer["error"]["type"] == "authentication_error"
        assert api.call("POST", "/embed", {"inputs": "x"}, key=key)[2]["error_type"] == "Unauthorized"
        assert api.call("GET", "/metrics", key=key)[0] == 401
    assert api.call("GET", "/health", key=None)[0] == 200
    assert api.call("POST", "/v1/embeddings", body)[0] == 200


def test_metrics_count_requests_by_route_model_and_status(served) -> None:
    repo, _, api = served
    api.call("POST", "/v1/embeddings", {"model": repo.name, "input": "x"})
    api.call("POST", "/v1/embeddings", {"model": "nope", "input": "x"})
    req = urllib.request.Request(api.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
    text = urllib.request.urlopen(req, timeout=10).read().decode()
    assert f'tritonize_api_requests_total{{model="{repo.name}",route="/v1/embeddings",status="200",version="1"}}' in text
    assert 'route="/v1/embeddings",status="404",version=""' in text
    assert (f'tritonize_api_request_duration_seconds_count{{model="{repo.name}",route="/v1/embeddings",version="1"}}'
            in text)


def test_beyond_the_in_flight_bound_is_429_with_retry_after(served) -> None:
    repo, endpoints, _ = served
    api = start_api(repo.repository, endpoints.grpc, "--max-concurrent-requests", "2")
    try:
        body = {"model": repo.name, "input": [" ".join(["word"] * 50)] * 8}
        with ThreadPoolExecutor(24) as pool:
            answers = list(pool.map(lambda _: api.call("POST", "/v1/embeddings", body), range(48)))
        refused = [a for a in answers if a[0] == 429]
        assert refused and all(a[0] == 200 for a in answers if a[0] != 429)
        assert all(a[1].get("Retry-After") == "1" and a[2]["error"]["type"] == "rate_limit_error" for a in refused)
        assert api.call("GET", "/health")[0] == 200
    finally:
        stop(api)


def test_several_workers_answer_on_one_port_and_their_metrics_are_summed(served) -> None:
    """`--workers 2`: two processes behind the one port (the key reaches both), every request answered as one
    process answers it, and /metrics counts the requests of both."""
    repo, endpoints, one = served
    api = start_api(repo.repository, endpoints.grpc, "--workers", "2", key=KEY)
    try:
        assert len(_workers(api.process.pid)) == 2
        body = {"model": repo.name, "input": ["Triton serves raw strings.", "x"]}
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: api.call("POST", "/v1/embeddings", body), range(40)))
        assert [a[0] for a in answers] == [200] * 40
        want = one.call("POST", "/v1/embeddings", body)[2]
        assert all(a[2]["data"] == want["data"] for a in answers)
        assert api.call("POST", "/v1/embeddings", body, key=None)[0] == 401
        req = urllib.request.Request(api.url + "/metrics", headers={"Authorization": f"Bearer {KEY}"})
        text = urllib.request.urlopen(req, timeout=10).read().decode()
        # Both workers' counts: one process alone would show only the requests it happened to accept.
        assert (f'tritonize_api_requests_total{{model="{repo.name}",route="/v1/embeddings",status="200",version="1"}} '
                f'40.0') in text
    finally:
        stop(api)


def _workers(parent: int) -> list[int]:
    """The processes uvicorn started for its workers (multiprocessing's spawn), children of `parent`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and b"spawn_main" in command:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
def test_local_up_runs_the_api_supervised_and_down_stops_it(matryoshka_repo, local_triton, local_options, tmp_path) -> None:
    """`deploy.py local up` starts the API beside the server; a killed API is started again by the supervisor
    and counted; `status` reports it; `down` stops it."""
    import os
    import signal

    from tritonize.api.child import ApiOptions
    from tritonize.runtime.instance import read_api
    from tritonize.runtime.local import LocalRuntime
    from tritonize.runtime.machine import free_ports

    (port,) = free_ports(1)
    runtime = LocalRuntime(local_options(matryoshka_repo.repository, tmp_path / "run"), quiet=True, supervise=True,
                           api=ApiOptions(port=port))
    runtime.up()
    try:
        api = Api(f"http://127.0.0.1:{port}", None, None)  # type: ignore[arg-type]
        assert api.call("POST", "/v1/embeddings", {"model": "emb", "input": "x"})[0] == 200
        first = read_api(runtime.directory)
        os.kill(first.pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            now = read_api(runtime.directory)
            if now and now.pid != first.pid and now.alive():
                try:
                    if api.call("GET", "/health")[0] == 200:
                        break
                except OSError:
                    pass
            time.sleep(0.2)
        else:
            raise AssertionError("the API was not started again within 15 s")
        assert read_api(runtime.directory).restarts == 1
        assert "API restart 1" in (runtime.directory / "supervisor.log").read_text()
        assert runtime.status().api == f"http://127.0.0.1:{port}: healthy, 1 restart(s)"
    finally:
        runtime.down()
    assert read_api(runtime.directory) is None
    with pytest.raises(OSError):
        api.call("GET", "/health")
