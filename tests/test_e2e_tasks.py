"""Rerankers and decoder embedders end to end on the real local Triton: raw strings in over gRPC, HTTP and
curl, the model's own library (CrossEncoder.predict, SentenceTransformer.encode) as the reference.

The folders come from tests/model_zoo.py, saved the way current sentence-transformers saves them.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import model_zoo
from tritonize.client import ServerError, TextClient
from tritonize.generate import generate
from tritonize.runtime.base import Endpoints, http_get
from tritonize.runtime.local import LocalRuntime
from tritonize.spec import GenerateOptions

ROOT = Path(__file__).resolve().parents[1]
ATOL = 1e-4
pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_triton")]

QUERY = "what does the server do with raw strings?"
DOCUMENTS = [
    "Triton serves raw strings with dynamic batching.",
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé café — 日本語のテキスト 🚀",
    "a",
    " ".join(["A long document that is cut at the maximum length, never the query."] * 30),
]


@dataclass
class Served:
    folder: Path
    endpoints: Endpoints
    name: str
    repository: Path

    def client(self, protocol: str) -> TextClient:
        return TextClient(self.endpoints.grpc if protocol == "grpc" else self.endpoints.http, self.name, protocol=protocol)


@pytest.fixture(scope="module")
def served(local_options, tmp_path_factory):
    """One local server per zoo folder: a BERT CrossEncoder (token_type_ids), a Qwen3 last-token embedder
    and an embedder that declares query/passage prompts."""
    base = tmp_path_factory.mktemp("tasks")
    runtimes, out = [], {}
    try:
        for zoo_id in ("bert-cross-encoder", "qwen3-st-lasttoken", "xlm-roberta-st-prompts"):
            folder = model_zoo.build(zoo_id, base / "zoo")
            name = zoo_id.replace("-", "_")
            repo = generate(GenerateOptions(model=str(folder), name=name, output=str(base / f"{name}-repo")))
            runtime = LocalRuntime(local_options(repo, base / "run"), quiet=True)
            endpoints = runtime.up()
            runtimes.append(runtime)
            out[zoo_id] = Served(folder, endpoints, name, repo)
        yield out
    finally:
        for runtime in runtimes:
            runtime.down()


def cross_encoder_scores(folder: Path, pairs: list[tuple[str, str]]) -> np.ndarray:
    from sentence_transformers import CrossEncoder

    return np.asarray(CrossEncoder(str(folder), device="cpu").predict(pairs, convert_to_numpy=True), dtype=np.float32)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_rerank_matches_cross_encoder_predict(served, protocol: str) -> None:
    s = served["bert-cross-encoder"]
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS])
    # A random tiny model scores every pair within ~1e-3: beyond the absolute bound, the served scores
    # must also move with the reference's from document to document (a wrong pairing would not).
    assert np.ptp(expected) > 1e-5
    with s.client(protocol) as client:
        assert client.task().name == "rerank"
        got = client.rerank(QUERY, DOCUMENTS)
    assert got.shape == (len(DOCUMENTS),)
    assert np.abs(got - expected).max() <= ATOL
    assert np.corrcoef(got, expected)[0, 1] > 0.999
    assert ((got > 0) & (got < 1)).all()  # the CrossEncoder's sigmoid is inside the graph


def test_rerank_pairs_batch_across_requests_and_cut_the_document(served) -> None:
    s = served["bert-cross-encoder"]
    queries = [QUERY, "short", "Ünïcödé café", QUERY]
    docs = [DOCUMENTS[0], DOCUMENTS[4], DOCUMENTS[2], DOCUMENTS[1]]
    expected = cross_encoder_scores(s.folder, list(zip(queries, docs)))
    with s.client("grpc") as client:
        results = client.infer_many([{"QUERY": [q], "TEXT": [d]} for q, d in zip(queries, docs)], concurrency=4)
    assert all(r.ok for r in results)
    got = np.array([r.outputs["score"][0, 0] for r in results])
    assert np.abs(got - expected).max() <= ATOL
    assert np.corrcoef(got, expected)[0, 1] > 0.999


def test_rerank_refuses_a_query_with_no_room_for_the_document(served) -> None:
    s = served["bert-cross-encoder"]
    with s.client("grpc") as client:
        with pytest.raises(ServerError) as info:
            client.rerank(" ".join(["word"] * 500), ["a document"])
        assert "INVALID_ARG" in str(info.value.status) or "truncat" in info.value.message.lower()
        assert np.isfinite(client.rerank(QUERY, DOCUMENTS[:2])).all()  # still serving


def test_curl_reranks_with_a_query(served) -> None:
    s = served["bert-cross-encoder"]
    result = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), *DOCUMENTS[:3]],
        env={**os.environ, "TRITON_HTTP_URL": s.endpoints.http, "TRITON_MODEL": s.name, "QUERY": QUERY},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}["score"]
    assert out["shape"] == [3, 1]
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS[:3]])
    assert np.abs(np.array(out["data"], dtype=np.float32) - expected).max() <= ATOL


def test_rerank_rows_must_pair_up(served) -> None:
    s = served["bert-cross-encoder"]
    body = {"inputs": [
        {"name": "QUERY", "shape": [1, 1], "datatype": "BYTES", "data": [QUERY]},
        {"name": "TEXT", "shape": [2, 1], "datatype": "BYTES", "data": DOCUMENTS[:2]},
    ]}
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{s.endpoints.http}/v2/models/{s.name}/infer", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(req, timeout=30)  # noqa: S310 - loopback
    assert 400 <= info.value.code < 500
    assert http_get(f"{s.endpoints.http}/v2/health/ready")[0] == 200


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_qwen3_last_token_embeddings_match_sentence_transformers(served, protocol: str) -> None:
    """The tokenizer ships with left padding; the server pads right; last-token pooling agrees either way."""
    from sentence_transformers import SentenceTransformer

    s = served["qwen3-st-lasttoken"]
    texts = ["hello world", "the quick brown fox jumps over the lazy dog " * 3, "Ünïcödé café", "a"]
    expected = SentenceTransformer(str(s.folder), device="cpu").encode(texts, prompt="", convert_to_numpy=True)
    with s.client(protocol) as client:
        together = client.embed(texts)
        alone = np.concatenate([client.embed([t]) for t in texts])
    assert np.abs(together - expected).max() <= ATOL
    assert np.abs(alone - expected).max() <= ATOL


@pytest.mark.parametrize("name", ["grpc_client.py", "http_client.py", "async_grpc_client.py"])
def test_client_scripts_rerank_with_a_query(served, name: str) -> None:
    import sys

    s = served["bert-cross-encoder"]
    url = s.endpoints.http if name == "http_client.py" else s.endpoints.grpc

    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "clients" / name), "--url", url, "--model", s.name, *args],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"})

    result = script("--json", "--query", QUERY, *DOCUMENTS[:3])
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert [r["text"] for r in rows] == DOCUMENTS[:3]
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS[:3]])
    assert np.abs(np.array([r["score"] for r in rows]) - expected).max() <= ATOL
    missing = script(*DOCUMENTS[:1])
    assert missing.returncode != 0 and "pass --query" in missing.stderr


def test_declared_prompts_are_listed_and_applied_by_the_client(served) -> None:
    """The server embeds exactly the text it gets; the client prepends a declared prompt, as encode() does."""
    from sentence_transformers import SentenceTransformer

    from tritonize.manifest import read_manifest

    s = served["xlm-roberta-st-prompts"]
    prompts = dict(read_manifest(s.repository).model.head.prompts)
    assert prompts == {"query": "query: ", "passage": "passage: "}
    model = SentenceTransformer(str(s.folder), device="cpu")
    texts = ["where is Paris?", "Ünïcödé café"]
    with s.client("grpc") as client:
        got = client.embed(texts, prompt=prompts["query"])
        plain = client.embed(texts)
    assert np.abs(got - model.encode(texts, prompt_name="query", convert_to_numpy=True)).max() <= ATOL
    assert np.abs(plain - model.encode(texts, prompt="", convert_to_numpy=True)).max() <= ATOL
    assert np.abs(got - plain).max() > 1e-3  # the prompt changed the embedding


def test_bench_and_tune_refuse_pairs_with_one_line(served, capsys) -> None:
    from tritonize.cli import main

    repo = str(served["bert-cross-encoder"].repository)
    for command in (["bench", "--repository", repo, "--requests", "5"], ["tune", "--repository", repo, "--requests", "5"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "a rerank model takes QUERY, TEXT" in err and "Traceback" not in err
