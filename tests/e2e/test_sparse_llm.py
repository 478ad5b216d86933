"""SPLADE sparse embeddings and causal-LM rerankers end to end on the real local Triton: raw strings in over gRPC,
HTTP and curl; SparseEncoder.encode and CrossEncoder.predict as the references; bench and tune measure both.

The folders come from tests/support/model_zoo.py, saved the way current sentence-transformers saves them.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request

import numpy as np
import pytest

from support import REPO_ROOT as ROOT
from support import model_zoo
from support.sparse import ATOL, TEXTS, assert_same_terms, encode
from support.stopping import stop_later
from support.tasks import QUERY, Served, cross_encoder_scores
from tritonize.generate import generate
from tritonize.runtime.local import LocalRuntime
from tritonize.spec.options import GenerateOptions

SPLADE, LLM_RERANKER = "bert-splade", "qwen3-llm-reranker"
DOCUMENTS = [
    "Triton serves raw strings with dynamic batching.",
    "The quick brown fox jumps over the lazy dog.",
    "Ünïcödé café — 日本語のテキスト 🚀",
    "a",
    " ".join(["A long document that is cut at the maximum length, never the query."] * 30),  # truncated, suffix restored
]


@pytest.fixture(scope="module")
def served(local_options, tmp_path_factory):
    base = tmp_path_factory.mktemp("sparse-llm")
    runtimes, out = [], {}
    try:
        for zoo_id in (SPLADE, LLM_RERANKER):
            folder = model_zoo.build(zoo_id, base / "zoo")
            name = zoo_id.replace("-", "_")
            repo = generate(GenerateOptions(model=str(folder), name=name, output=str(base / f"{name}-repo")))
            runtime = LocalRuntime(local_options(repo, base / "run"), quiet=True)
            endpoints = runtime.up()
            runtimes.append(runtime)
            out[zoo_id] = Served(folder, endpoints, name, repo)
        yield out
    finally:
        stop_later(*runtimes)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_sparse_embeddings_are_sparse_encoders_terms(served, protocol: str) -> None:
    s = served[SPLADE]
    expected = encode(s.folder, TEXTS)
    counts = (expected > 0).sum(1)
    assert (counts > 0).all() and (counts < expected.shape[1] // 4).all() and len(set(counts)) > 1  # sparse, ragged
    with s.client(protocol) as client:
        assert client.task().name == "sparse-embedding"
        together = client.sparse(TEXTS)
        alone = [client.sparse([t])[0] for t in TEXTS]
        raw = client.infer(TEXTS)
    assert_same_terms(together, expected)
    assert_same_terms(alone, expected)
    # Compact on the wire: one row per text as wide as its request's most terms, not the vocabulary.
    assert raw["indices"].dtype == np.int32 and raw["values"].dtype == np.float32
    assert raw["indices"].shape == raw["values"].shape == (len(TEXTS), counts.max())
    assert (raw["indices"] == -1).sum() == counts.max() * len(TEXTS) - counts.sum()
    pairs = together[0].pairs()  # text-embeddings-inference's /embed_sparse form
    assert [p["index"] for p in pairs] == np.flatnonzero(expected[0]).tolist()


def test_curl_gets_sparse_terms(served) -> None:
    s = served[SPLADE]
    result = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), *TEXTS[:2]],
        env={**os.environ, "TRITON_HTTP_URL": s.endpoints.http, "TRITON_MODEL": s.name},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}
    expected = encode(s.folder, TEXTS[:2])
    width = int((expected > 0).sum(1).max())
    assert out["indices"]["shape"] == out["values"]["shape"] == [2, width]
    indices = np.array(out["indices"]["data"]).reshape(2, width)
    values = np.array(out["values"]["data"], dtype=np.float32).reshape(2, width)
    for ids, vals, want in zip(indices, values, expected):
        kept = ids >= 0
        assert ids[kept].tolist() == np.flatnonzero(want).tolist()
        assert np.abs(vals[kept] - want[ids[kept]]).max() <= ATOL and not vals[~kept].any()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_llm_rerank_matches_cross_encoder_predict(served, protocol: str) -> None:
    """The pair rendered through the folder's chat template, the long document cut and the template's end restored,
    the yes/no logits read at the last real token: what CrossEncoder.predict returns, batched or alone."""
    s = served[LLM_RERANKER]
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS])
    assert np.ptp(expected) > 1e-2  # the scores tell the documents apart: a wrong rendering would show
    with s.client(protocol) as client:
        assert client.task().name == "rerank"
        together = client.rerank(QUERY, DOCUMENTS)
        alone = np.concatenate([client.rerank(QUERY, [d]) for d in DOCUMENTS])
    assert np.abs(together - expected).max() <= ATOL and np.abs(alone - expected).max() <= ATOL
    assert ((together > 0) & (together < 1)).all()  # the CrossEncoder's sigmoid, applied to the served logits


def test_llm_rerank_pairs_batch_across_requests(served) -> None:
    s = served[LLM_RERANKER]
    queries = [QUERY, "short", "Ünïcödé café", QUERY]
    docs = [DOCUMENTS[0], DOCUMENTS[4], DOCUMENTS[2], DOCUMENTS[1]]
    expected = cross_encoder_scores(s.folder, list(zip(queries, docs)), logits=True)
    with s.client("grpc") as client:
        results = client.infer_many([{"QUERY": [q], "TEXT": [d]} for q, d in zip(queries, docs)], concurrency=4)
    assert all(r.ok for r in results)
    assert np.abs(np.array([r.outputs["logit"][0, 0] for r in results]) - expected).max() <= ATOL


def test_curl_reranks_with_an_llm(served) -> None:
    s = served[LLM_RERANKER]
    result = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), *DOCUMENTS[:3]],
        env={**os.environ, "TRITON_HTTP_URL": s.endpoints.http, "TRITON_MODEL": s.name, "QUERY": QUERY},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}["logit"]
    assert out["shape"] == [3, 1]
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS[:3]], logits=True)
    assert np.abs(np.array(out["data"], dtype=np.float32) - expected).max() <= ATOL


@pytest.mark.parametrize("zoo_id", [SPLADE, LLM_RERANKER])
def test_the_printed_sample_request_works(served, zoo_id: str) -> None:
    from tritonize import tasks
    from tritonize.manifest import read_manifest

    s = served[zoo_id]
    task = tasks.of(read_manifest(s.repository).model.head)
    req = urllib.request.Request(f"{s.endpoints.http}/v2/models/{s.name}/infer", data=task.contract.sample_body().encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - loopback
        outputs = json.loads(resp.read())["outputs"]
    assert sorted(o["name"] for o in outputs) == sorted(task.contract.ensemble_output_names)


# The template alone is longer than 32 tokens: the reranker's short rows are longer.
SHORT_TOKENS = {SPLADE: 32, LLM_RERANKER: 128}


@pytest.mark.parametrize("zoo_id", [SPLADE, LLM_RERANKER])
def test_bench_measures_sparse_and_llm_rerankers(served, zoo_id: str, tmp_path) -> None:
    """Triton's, the floor's and a PyTorch server's answers agree (terms, scores), then all are timed."""
    from tritonize.cli import main

    s = served[zoo_id]
    out = tmp_path / "results"
    short = SHORT_TOKENS[zoo_id]
    rc = main([
        "bench", "--repository", str(s.repository), "--url", s.endpoints.http, "--grpc-url", s.endpoints.grpc,
        "--requests", "12", "--warmup", "2", "--concurrency", "1,2", "--workloads", "short,mixed",
        "--short-tokens", str(short), "--protocols", "grpc,http", "--peers", "doc-batched,floor",
        "--output", str(out),
    ])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    for wname in ("short", "mixed"):
        assert doc["checks"]["triton"][wname]["passed"] and doc["checks"]["triton"][wname]["rows"] == 8
        assert doc["checks"]["doc-batched"][wname]["passed"]
    assert doc["workloads"]["short"]["tokens"]["min"] == doc["workloads"]["short"]["tokens"]["max"] == short
    for r in doc["runs"]:
        assert r["completed"] == 12 and r["errors"] == 0, r
        if r["system"].startswith("triton"):
            assert ("post" in r["steps"]) == (zoo_id == SPLADE) and r["steps"]["model"]["inferences"] >= 12


@pytest.mark.parametrize("zoo_id", [SPLADE, LLM_RERANKER])
def test_tune_measures_sparse_and_llm_rerankers(served, zoo_id: str, tmp_path) -> None:
    import shutil

    from tritonize.cli import main
    from tritonize.manifest import read_manifest

    s = served[zoo_id]
    repo = tmp_path / "repo"
    shutil.copytree(s.repository, repo)
    # One point, the served configuration: what is measured per task (several points: test_bench.py).
    delay = read_manifest(s.repository).options.max_queue_delay_us
    rc = main(["tune", "--repository", str(repo), "--grid", f"max_queue_delay_us={delay}", "--requests", "10",
               "--warmup", "2", "--concurrency", "1,2", "--workloads", "mixed", "--dry-run", "--output", str(tmp_path / "out")])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert len(result["points"]) == 1 and not result["changed"]
    for point in result["points"]:
        assert not point["error"]
        assert [(r["workload"], r["completed"], r["errors"]) for r in point["runs"]] == [("mixed", 10, 0), ("mixed", 10, 0)]
