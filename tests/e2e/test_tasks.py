"""Rerankers and decoder embedders end to end on the real local Triton: raw strings in over gRPC, HTTP and
curl, the model's own library (CrossEncoder.predict, SentenceTransformer.encode) as the reference.

The folders come from tests/support/model_zoo.py, saved the way current sentence-transformers saves them.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest

from support import REPO_ROOT as ROOT
from support import model_zoo
from support.stopping import stop_later
from support.tasks import (
    ATOL,
    DOCUMENTS,
    EMBED_TEXTS,
    NER_TEXTS,
    QA_PAIRS,
    QUERY,
    Served,
    assert_same_answer,
    assert_same_answers,
    assert_same_entities,
    cross_encoder_scores,
    pipeline_entities,
    redraw_token_head,
    reference_answer,
    spread_qa_head,
)
from tritonize.client import ServerError
from tritonize.generate import generate
from tritonize.runtime.base import http_get
from tritonize.runtime.local import LocalRuntime
from tritonize.spec.options import GenerateOptions

# zoo id -> generate options: a BERT CrossEncoder (token_type_ids), a Qwen3 last-token embedder, an embedder
# that declares prompts, token classifiers with WordPiece and byte-level BPE offsets, EmbeddingGemma with
# Matryoshka sizes and an e5-mistral-like last-token embedder.
SERVED = {
    "bert-cross-encoder": {},
    # its Python steps count the statistics in Triton, whose falling sum test_a_sum_that_falls_... needs (served in
    # graphs, as generate's default, by test_production.py)
    "qwen3-st-lasttoken": {"tokenizer": "python"},
    "gemma3-st-embeddinggemma": {"matryoshka_dims": [32, 16, 8]},
    "mistral-st-lasttoken": {},
    "xlm-roberta-st-prompts": {},
    "bert-token-cls": {"aggregation": "simple"},
    "roberta-token-cls": {"aggregation": "first"},
    "bert-qa": {},
    "roberta-qa": {},
    "bert-seq-cls-multilabel": {},
}


@pytest.fixture(scope="module")
def served(local_options, tmp_path_factory):
    """One local server per zoo folder in SERVED."""
    from concurrent.futures import ThreadPoolExecutor

    base = tmp_path_factory.mktemp("tasks")
    runtimes, starts, out = [], {}, {}
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:  # each server loads while the next model is built
            for zoo_id, options in SERVED.items():
                folder = model_zoo.build(zoo_id, base / "zoo")
                if zoo_id.endswith("token-cls"):
                    redraw_token_head(folder)
                if zoo_id.endswith("-qa"):
                    spread_qa_head(folder)
                name = zoo_id.replace("-", "_")
                repo = generate(GenerateOptions(model=str(folder), name=name, output=str(base / f"{name}-repo"), **options))
                runtime = LocalRuntime(local_options(repo, base / "run"), quiet=True)
                runtimes.append(runtime)
                starts[zoo_id] = (pool.submit(runtime.up), folder, name, repo)
        for zoo_id, (start, folder, name, repo) in starts.items():
            out[zoo_id] = Served(folder, start.result(), name, repo)
        yield out
    finally:
        stop_later(*runtimes)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_multi_label_scores_are_the_pipelines_sigmoids(served, protocol: str) -> None:
    """problem_type multi_label_classification: a sigmoid per label, as transformers' pipeline applies it;
    Triton's classification extension ranks those independent scores."""
    from transformers import pipeline

    s = served["bert-seq-cls-multilabel"]
    texts = [DOCUMENTS[0], "short", "Ünïcödé café"]
    pipe = pipeline("text-classification", model=str(s.folder), device="cpu")
    expected = [{d["label"]: d["score"] for d in row} for row in pipe(texts, top_k=None)]
    with s.client(protocol) as client:
        assert client.task().name == "classification"
        probabilities = client.infer(texts, outputs=["probabilities"])["probabilities"]
        ranked = client.classify(texts, top_k=len(expected[0]))
    id2label = json.loads((s.folder / "config.json").read_text())["id2label"]
    order = [id2label[str(i)] for i in range(len(id2label))]
    assert max(abs(p.sum() - 1.0) for p in probabilities) > 0.05  # independent scores, not a softmax
    for row, want, top in zip(probabilities, expected, ranked):
        assert np.abs(row - np.array([want[label] for label in order])).max() <= ATOL
        assert [t.label for t in top] == sorted(want, key=want.get, reverse=True)
        assert max(abs(t.score - want[t.label]) for t in top) <= ATOL


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
    assert ((got > 0) & (got < 1)).all()  # the CrossEncoder's sigmoid, applied by the client to the served logits


def test_rerank_pairs_batch_across_requests_and_cut_the_document(served) -> None:
    s = served["bert-cross-encoder"]
    queries = [QUERY, "short", "Ünïcödé café", QUERY]
    docs = [DOCUMENTS[0], DOCUMENTS[4], DOCUMENTS[2], DOCUMENTS[1]]
    expected = cross_encoder_scores(s.folder, list(zip(queries, docs)), logits=True)
    with s.client("grpc") as client:
        results = client.infer_many([{"QUERY": [q], "TEXT": [d]} for q, d in zip(queries, docs)], concurrency=4)
    assert all(r.ok for r in results)
    got = np.array([r.outputs["logit"][0, 0] for r in results])  # the ensemble answers the model's logit
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
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}["logit"]
    assert out["shape"] == [3, 1]
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS[:3]], logits=True)
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


def test_a_sum_that_falls_is_counted_and_the_server_lives(served) -> None:
    """The centroid cosine of a tiny Qwen3 is negative for some texts, so its histogram's sum falls: a gauge takes
    that step. Triton refuses a counter's negative step, and in Triton 2.51 the refusal's way back to the step
    could abort the whole server on a loaded machine (docs/reliability.md)."""
    from support.statistics import expected_sum, sum_series

    s = served["qwen3-st-lasttoken"]
    metric = "tritonize_output_centroid_similarity"
    texts = ["hello world", "the quick brown fox jumps over the lazy dog " * 3, "Ünïcödé café", "a"]
    step = expected_sum(s.repository, s.name, metric, {"TEXT": texts})
    assert step < 0  # the case is exercised
    _, before = sum_series(s.endpoints.metrics, s.name, metric)
    with s.client("grpc") as client:
        client.embed(texts)
    kind, after = sum_series(s.endpoints.metrics, s.name, metric)
    assert kind == "gauge"
    assert abs((after - before) - step) < 1e-4
    assert http_get(f"{s.endpoints.http}/v2/health/ready")[0] == 200


# Gemma 3 (bidirectional, sliding window, two Dense, byte fallback) and Mistral (causal, sliding window, </s>
# appended): zoo id -> the declared prompt a client prepends.
NEW_EMBEDDERS = {"gemma3-st-embeddinggemma": "query", "mistral-st-lasttoken": "web_search_query"}


@pytest.mark.parametrize("zoo_id", list(NEW_EMBEDDERS))
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_gemma_and_mistral_embeddings_match_sentence_transformers(served, zoo_id: str, protocol: str) -> None:
    from sentence_transformers import SentenceTransformer

    from tritonize.manifest import read_manifest

    s = served[zoo_id]
    prompt_name = NEW_EMBEDDERS[zoo_id]
    prompt = dict(read_manifest(s.repository).model.head.prompts)[prompt_name]
    model = SentenceTransformer(str(s.folder), device="cpu")
    with s.client(protocol) as client:
        assert client.task().name == "embedding"
        together = client.embed(EMBED_TEXTS)
        alone = np.concatenate([client.embed([t]) for t in EMBED_TEXTS])
        prompted = client.embed(EMBED_TEXTS, prompt=prompt)
    expected = model.encode(EMBED_TEXTS, prompt="", convert_to_numpy=True)
    assert np.abs(together - expected).max() <= ATOL
    assert np.abs(alone - expected).max() <= ATOL
    assert np.abs(prompted - model.encode(EMBED_TEXTS, prompt_name=prompt_name, convert_to_numpy=True)).max() <= ATOL
    assert np.abs(prompted - together).max() > 1e-3  # the prompt changed the embedding


def test_matryoshka_cuts_of_served_embeddings_match_truncate_dim(served) -> None:
    """What the API's `dimensions` returns: the served vector cut by the head, as encode(truncate_dim=d) cuts it."""
    from sentence_transformers import SentenceTransformer

    from tritonize.manifest import read_manifest

    s = served["gemma3-st-embeddinggemma"]
    head = read_manifest(s.repository).model.head
    assert head.dimensions == (32, 16, 8)
    with s.client("grpc") as client:
        full = client.embed(EMBED_TEXTS)
    for d in head.dimensions:
        model = SentenceTransformer(str(s.folder), device="cpu", truncate_dim=d)
        expected = model.encode(EMBED_TEXTS, prompt="", normalize_embeddings=True, convert_to_numpy=True)
        assert expected.shape == (len(EMBED_TEXTS), d)
        assert np.abs(head.truncate(full, d) - expected).max() <= ATOL


def test_curl_embeds_with_embeddinggemma(served) -> None:
    from sentence_transformers import SentenceTransformer

    s = served["gemma3-st-embeddinggemma"]
    result = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), *EMBED_TEXTS[:2]],
        env={**os.environ, "TRITON_HTTP_URL": s.endpoints.http, "TRITON_MODEL": s.name},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}["embedding"]
    assert out["shape"] == [2, 32]
    expected = SentenceTransformer(str(s.folder), device="cpu").encode(EMBED_TEXTS[:2], prompt="", convert_to_numpy=True)
    assert np.abs(np.array(out["data"], dtype=np.float32).reshape(2, 32) - expected).max() <= ATOL


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
    expected = cross_encoder_scores(s.folder, [(QUERY, d) for d in DOCUMENTS[:3]], logits=True)
    assert np.abs(np.array([r["logit"] for r in rows]) - expected).max() <= ATOL  # the ensemble's answer
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


@pytest.mark.parametrize("zoo_id", ["bert-token-cls", "roberta-token-cls"])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_entities_match_the_token_classification_pipeline(served, zoo_id: str, protocol: str) -> None:
    s = served[zoo_id]
    expected = pipeline_entities(s.folder, SERVED[zoo_id]["aggregation"], NER_TEXTS)
    assert sum(len(e) for e in expected) >= 5  # the redrawn head finds entities: the comparison is not vacuous
    with s.client(protocol) as client:
        assert client.task().name == "token-classification"
        together = client.entities(NER_TEXTS)
        alone = [client.entities([t])[0] for t in NER_TEXTS]
    assert_same_entities(together, expected)
    assert_same_entities(alone, expected)
    for text, found in zip(NER_TEXTS, together):  # character offsets into the original text
        assert all(0 <= e["start"] <= e["end"] <= len(text) for e in found)


def test_curl_gets_entities_as_json(served) -> None:
    s = served["bert-token-cls"]
    result = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), *NER_TEXTS[:2]],
        env={**os.environ, "TRITON_HTTP_URL": s.endpoints.http, "TRITON_MODEL": s.name},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}["entities"]
    assert out["shape"] == [2, 1]
    assert_same_entities([json.loads(cell) for cell in out["data"]], pipeline_entities(s.folder, "simple", NER_TEXTS[:2]))


@pytest.mark.parametrize("zoo_id", ["bert-qa", "roberta-qa"])
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_answers_match_the_question_answering_pipeline(served, zoo_id: str, protocol: str) -> None:
    s = served[zoo_id]
    expected = [reference_answer(s.folder, q, c) for q, c in QA_PAIRS]
    with s.client(protocol) as client:
        assert client.task().name == "question-answering"
        together = client.answers([q for q, _ in QA_PAIRS], [c for _, c in QA_PAIRS])
        alone = [client.answer(q, c) for q, c in QA_PAIRS]
    assert_same_answers(together, alone, expected)


def test_long_context_is_windowed_not_cut(served) -> None:
    """An answer that only the last window holds is still found: the context is split with a stride, not truncated."""
    s = served["bert-qa"]
    question, context = QA_PAIRS[2]
    with s.client("grpc") as client:
        got = client.answer(question, context)
    want = reference_answer(s.folder, question, context)
    assert_same_answer(got, want)
    from transformers import AutoTokenizer

    tokens = len(AutoTokenizer.from_pretrained(str(s.folder))(question, context)["input_ids"])
    assert tokens > 2 * 128  # several windows of the model's 128 tokens


def test_qa_refuses_bad_text_and_keeps_serving(served) -> None:
    s = served["bert-qa"]
    with s.client("grpc") as client:
        with pytest.raises(ServerError, match="CONTEXT\\[0\\] is empty"):
            client.answer("who?", "   ")
        with pytest.raises(ServerError, match="not valid UTF-8"):
            client.answers(["who?"], [b"\xff\xfe bad"])
        with pytest.raises(ServerError, match="the request carries 2097156 bytes of text, over this server's limit of "
                                              "2097152 bytes per request"):  # the question's 4 bytes count too
            client.answers(["who?"], ["x" * (2 * 1024 * 1024)])
        assert client.answer(*QA_PAIRS[0]) is not None


def test_curl_asks_a_question(served) -> None:
    s = served["roberta-qa"]
    question, context = QA_PAIRS[0]
    result = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), context],
        env={**os.environ, "TRITON_HTTP_URL": s.endpoints.http, "TRITON_MODEL": s.name, "QUESTION": question},
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}["answer"]
    assert out["shape"] == [1, 1]
    assert_same_answer(json.loads(out["data"][0]), reference_answer(s.folder, question, context))


def test_client_script_answers_a_question(served) -> None:
    import sys

    s = served["bert-qa"]
    question, context = QA_PAIRS[0]
    result = subprocess.run(
        [sys.executable, str(ROOT / "clients" / "grpc_client.py"), "--url", s.endpoints.grpc, "--model", s.name,
         "--json", "--question", question, context],
        capture_output=True, text=True, timeout=120, env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["results"]
    assert row["text"] == context
    assert_same_answer(row["answer"], reference_answer(s.folder, question, context))


@pytest.mark.parametrize("zoo_id", list(SERVED))
def test_the_printed_sample_request_works_for_every_task(served, zoo_id: str) -> None:
    """The body `deploy.py local up` and each repository's README print is answered with 200."""
    import urllib.request

    from tritonize import tasks
    from tritonize.manifest import read_manifest
    from tritonize.runtime.base import sample_curl

    s = served[zoo_id]
    manifest = read_manifest(s.repository)
    assert "-H 'Content-Type: application/json'" in sample_curl(s.endpoints, manifest)
    body = tasks.of(manifest.model.head).contract.sample_body().encode()
    req = urllib.request.Request(f"{s.endpoints.http}/v2/models/{s.name}/infer", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 - loopback
        outputs = json.loads(resp.read())["outputs"]
    assert sorted(o["name"] for o in outputs) == sorted(tasks.of(manifest.model.head).contract.ensemble_output_names)
    assert s.repository.joinpath("README.md").read_text().count(s.name) >= 1


# -- bench and tune for every task -------------------------------------------------

BENCHED = ["bert-cross-encoder", "bert-token-cls", "bert-qa", "gemma3-st-embeddinggemma"]


@pytest.mark.parametrize("zoo_id", BENCHED)
def test_the_floor_answers_as_the_server_does(served, zoo_id: str) -> None:
    """The bench's floor runs the repository's steps in-process: the same answers as Triton, whole (entities
    decoded, every window of a long context), so the floor is never a cheaper part of the work."""
    from tritonize import tasks
    from tritonize.bench import check, corpus, floor
    from tritonize.manifest import read_manifest

    s = served[zoo_id]
    f = floor.Floor(s.repository)
    task = tasks.of(read_manifest(s.repository).model.head)
    mixed = corpus.workloads_for(f.chain, task, ["mixed"], None, 32, 128)["mixed"]
    long_rows = [r for r in mixed.rows if len(f.chain.lengths(r)) > 1]
    rows = mixed.rows[:6] + long_rows[:2]
    if task.pipeline.orchestrates:
        assert long_rows  # contexts of several windows are in the workload, and are checked
    with s.client("grpc") as client:
        got = [client.infer(dict(zip([t.name for t in task.contract.text_inputs], ([x] for x in row)))) for row in rows]
    result = check.compare([f.one(row).outputs for row in rows], got)
    assert result.passed, result.first_mismatch
    assert set(got[0]) == set(task.contract.ensemble_output_names)


@pytest.mark.parametrize("zoo_id", BENCHED)
def test_bench_measures_every_task(served, zoo_id: str, tmp_path) -> None:
    from tritonize.cli import main

    s = served[zoo_id]
    out = tmp_path / "results"
    rc = main([
        "bench", "--repository", str(s.repository), "--url", s.endpoints.http, "--grpc-url", s.endpoints.grpc,
        "--requests", "20", "--warmup", "3", "--concurrency", "1,2", "--workloads", "short,mixed", "--short-tokens", "32",
        "--protocols", "grpc,http", "--peers", "doc-batched,floor", "--output", str(out),
    ])
    assert rc == 0
    doc = json.loads((out / "bench.json").read_text())
    task = doc["meta"]["task"]
    pair = task in ("rerank", "question-answering")
    for wname, w in doc["workloads"].items():
        assert len(w["example"]) == (2 if pair else 1)
        assert doc["checks"]["triton"][wname]["passed"] and doc["checks"]["triton"][wname]["rows"] == 8
        assert doc["checks"]["doc-batched"][wname]["passed"]  # the PyTorch peer computes the same answers
    assert doc["workloads"]["short"]["tokens"]["min"] == doc["workloads"]["short"]["tokens"]["max"] == 32
    systems = {(r["system"], r["workload"], r["concurrency"]) for r in doc["runs"]}
    assert systems == {(sy, w, c) for sy in ("triton-grpc", "triton-http", "doc-batched")
                       for w in ("short", "mixed") for c in (1, 2)}
    for r in doc["runs"]:
        assert r["completed"] == 20 and r["errors"] == 0, r
        if r["system"].startswith("triton"):
            steps = r["steps"]
            assert steps["ensemble"]["requests"] == 20
            # Every step a request passes through is counted; the model step sees each row (or window) at least once.
            assert ("post" in steps) == (task == "token-classification")
            assert steps["model"]["inferences"] >= 20
            assert r["breakdown"]["server_ms"] > 0
        else:
            assert r["server"]["requests"] == 20 and r["server"]["real_tokens"] > 0
    for w in ("short", "mixed"):
        assert doc["floor"][w]["arrival"]["rps"] > 0 and doc["floor"][w]["batch1_latency_ms"]["requests"] == 20


@pytest.mark.parametrize("zoo_id", ["bert-qa", "mistral-st-lasttoken"])
def test_tune_measures_question_answering_and_decoder_embedders(served, zoo_id: str, tmp_path) -> None:
    import shutil

    from tritonize.cli import main
    from tritonize.manifest import read_manifest

    s = served[zoo_id]
    repo = tmp_path / "repo"
    shutil.copytree(s.repository, repo)
    # One point, the served configuration: what is measured per task (several points: test_bench.py).
    delay = read_manifest(s.repository).options.max_queue_delay_us
    rc = main(["tune", "--repository", str(repo), "--grid", f"max_queue_delay_us={delay}", "--requests", "15",
               "--warmup", "3", "--concurrency", "1,2", "--workloads", "mixed", "--dry-run", "--output", str(tmp_path / "out")])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "tune.json").read_text())
    assert len(result["points"]) == 1 and not result["changed"]
    for point in result["points"]:
        assert not point["error"]
        assert [(r["workload"], r["concurrency"], r["completed"], r["errors"]) for r in point["runs"]] == [
            ("mixed", 1, 15, 0), ("mixed", 2, 15, 0)]
    assert read_manifest(repo).options.max_queue_delay_us == read_manifest(s.repository).options.max_queue_delay_us


def test_async_client_answers_as_the_blocking_one(served) -> None:
    import asyncio

    from tritonize.client import AsyncTextClient

    s = served["bert-qa"]

    async def ask() -> list:
        async with AsyncTextClient(s.endpoints.grpc, s.name) as client:
            return [await client.answer(*QA_PAIRS[0]), *(await client.answers(*zip(*QA_PAIRS[:2])))]

    with s.client("grpc") as client:
        expected = [client.answer(*QA_PAIRS[0]), *client.answers(*zip(*QA_PAIRS[:2]))]
    assert asyncio.run(ask()) == expected


def test_bench_fails_when_the_server_answers_otherwise(served, tmp_path, capsys) -> None:
    """Pointed at a server that serves another model, bench says so and exits 1 instead of timing it."""
    from tritonize.cli import main

    mine, other = served["bert-qa"], served["roberta-qa"]
    rc = main(["bench", "--repository", str(mine.repository), "--url", other.endpoints.http, "--grpc-url",
               other.endpoints.grpc, "--model", other.name, "--requests", "5", "--concurrency", "1", "--workloads", "short",
               "--short-tokens", "32", "--protocols", "grpc", "--peers", "none", "--output", str(tmp_path)])
    assert rc == 1
    assert "Triton's answers differ from the floor's" in capsys.readouterr().err
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert not doc["checks"]["triton"]["short"]["passed"]
