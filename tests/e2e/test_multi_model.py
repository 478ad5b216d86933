"""Several models in one repository, served: an embedder and a reranker side by side, each answering as its own
library does, from one local Triton checked by one health check.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from support import REPO_ROOT, model_zoo
from support import tasks as support_tasks
from support.multi_model import QUERY, RERANK, Stack, tree
from support.stopping import stop_later
from tritonize.cli import main
from tritonize.client import TextClient
from tritonize.generate import generate
from tritonize.manifest import entries, read_manifest
from tritonize.repository import versions
from tritonize.runtime.base import Endpoints
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.supervisor import CHECK_S, FAILURES
from tritonize.serving import health
from tritonize.spec import MANIFEST_FILE
from tritonize.spec.options import GenerateOptions

ATOL = 1e-4
DOCUMENTS = ["Triton serves raw strings with dynamic batching.", "The quick brown fox jumps over the lazy dog.",
             "Ünïcödé café — 日本語のテキスト 🚀"]
TEXTS = ["an embedder and a reranker", "in one server", "Ünïcödé café"]


def cross_encoder_scores(folder: Path, documents: list[str], logits: bool = False) -> np.ndarray:
    """CrossEncoder.predict of QUERY against each document (logits: with the identity as its activation)."""
    return support_tasks.cross_encoder_scores(folder, [(QUERY, d) for d in documents], logits)


# --------------------------------------------------------------------------- one server


@dataclass
class Served:
    stack: Stack
    runtime: LocalRuntime
    endpoints: Endpoints
    run_dir: Path


@pytest.fixture(scope="module")
def stack(stack: Stack, tmp_path_factory) -> Stack:
    """A copy of the two-model repository tests/conftest.py shares: the tests here serve it, add a model and a
    version to it, and tune it, so the unit tests keep reading the repository as written."""
    copy = tmp_path_factory.mktemp("served-stack") / stack.repository.name
    shutil.copytree(stack.repository, copy)
    return replace(stack, repository=copy)


@pytest.fixture(scope="module")
def served(stack: Stack, local_options, local_triton, tmp_path_factory):
    """One local Triton on the repository of both models; explicit model control, so a version can switch."""
    run_dir = tmp_path_factory.mktemp("run")
    runtime = LocalRuntime(local_options(stack.repository, run_dir, model_control="explicit"), quiet=True)
    endpoints = runtime.up()
    try:
        yield Served(stack, runtime, endpoints, run_dir)
    finally:
        stop_later(runtime)


def test_one_server_answers_both_models_as_their_libraries_do(served: Served) -> None:
    from sentence_transformers import SentenceTransformer

    s = served.stack
    with TextClient(served.endpoints.grpc, s.embedder) as client:
        assert client.task().name == "embedding"
        embeddings = client.embed(TEXTS)
    expected = SentenceTransformer(str(s.embedder_source), device="cpu").encode(TEXTS, convert_to_numpy=True)
    assert np.abs(embeddings - expected).max() <= ATOL
    with TextClient(served.endpoints.grpc, RERANK) as client:
        assert client.task().name == "rerank"
        scores = client.rerank(QUERY, DOCUMENTS)
    assert np.abs(scores - cross_encoder_scores(s.reranker_source, DOCUMENTS)).max() <= ATOL


def test_the_health_check_runs_every_models_sample(served: Served, tmp_path: Path, capsys) -> None:
    s, http = served.stack, served.endpoints.http
    health_file = s.repository / health.HEALTH_FILE
    probe = health.probe_file(http, str(health_file))
    assert probe.ok and f"{s.embedder} answered" in probe.detail and f"{RERANK} answered" in probe.detail
    status = served.runtime.status()
    assert status.ready and f"{RERANK} answered" in status.health and f"{s.embedder} answered" in status.health
    # The reranker's sample broken: the whole check fails, and says which model.
    checks = health.checks_of(json.loads(health_file.read_text()))
    checks[1]["request"]["inputs"][0]["name"] = "NO_SUCH_INPUT"
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(health.document(checks)))
    probe = health.probe_file(http, str(broken))
    assert not probe.ok and probe.code == 400 and probe.detail.startswith(f"{RERANK}: HTTP 400")
    capsys.readouterr()
    assert health.main(["--url", http, "--file", str(broken), "--busy-ok"]) == 1
    assert capsys.readouterr().out.startswith(f"unhealthy: {RERANK}: HTTP 400")
    # A health.json of one model, as repositories of one model hold it, still reads.
    single = tmp_path / "single.json"
    single.write_text(json.dumps(checks[0]))
    assert health.probe_file(http, str(single)).ok


def test_deploy_status_and_summary_show_every_model(served: Served, capsys) -> None:
    from tritonize.runtime.cli import print_summary

    s, e = served.stack, served.endpoints
    capsys.readouterr()
    print_summary(e, s.repository, served.runtime)
    printed = capsys.readouterr().out
    for name in (s.embedder, RERANK):
        assert f"/v2/models/{name}/infer" in printed
    rc = main(["deploy", "local", "status", "--repository", str(s.repository), "--run-dir", str(served.run_dir),
               "--http-port", str(e.http_port), "--grpc-port", str(e.grpc_port), "--metrics-port", str(e.metrics_port)])
    printed = capsys.readouterr().out
    assert rc == 0
    assert f"{s.embedder} answered" in printed and f"{RERANK} answered" in printed
    for name in (s.embedder, f"{s.embedder}_model", RERANK, f"{RERANK}_tokenizer"):
        assert any(line.split()[:1] == [name] and "READY" in line for line in printed.splitlines()), name


def test_bench_measures_the_model_it_is_told(served: Served, tmp_path: Path, capsys) -> None:
    s, e = served.stack, served.endpoints
    common = ["bench", "--repository", str(s.repository), "--url", f"{e.host}:{e.http_port}",
              "--grpc-url", e.grpc, "--metrics-url", f"{e.host}:{e.metrics_port}", "--requests", "12", "--warmup", "2",
              "--concurrency", "1", "--workloads", "short", "--short-tokens", "32", "--protocols", "grpc",
              "--peers", "floor"]
    capsys.readouterr()
    assert main([*common, "--output", str(tmp_path / "none")]) == 2
    assert "holds 2 models" in capsys.readouterr().err
    assert main([*common, "--model", RERANK, "--output", str(tmp_path / "out")]) == 0
    doc = json.loads((tmp_path / "out" / "bench.json").read_text())
    assert doc["meta"]["model"] == RERANK and doc["meta"]["task"] == "rerank"
    assert doc["meta"]["inputs"] == ["QUERY", "TEXT"]
    assert all(c["passed"] for c in doc["checks"]["triton"].values())  # the served reranker answers as its floor
    (run,) = doc["runs"]
    assert run["steps"]["ensemble"]["name"] == RERANK and run["steps"]["ensemble"]["requests"] == 12
    assert run["served"]["tritonize_texts_total"] == 12  # the reranker's steps' counters only


def test_clients_name_the_model_where_several_are_served(served: Served, tiny_embedding_repo) -> None:
    import os
    import subprocess
    import sys

    root = REPO_ROOT
    s, e = served.stack, served.endpoints

    def run(command: list[str], **env: str) -> subprocess.CompletedProcess:
        environment = {k: v for k, v in os.environ.items() if k not in ("TRITON_MODEL", "MODEL")}
        return subprocess.run(command, env={**environment, "HF_HUB_OFFLINE": "1", **env}, capture_output=True,
                              text=True, timeout=120)

    script = [sys.executable, str(root / "clients" / "grpc_client.py"), "--url", e.grpc, "--json"]
    ambiguous = run([*script, "--repository", str(s.repository), "a text"])
    assert ambiguous.returncode != 0
    assert f"serves 2 models ({s.embedder}, {RERANK}): pass --model NAME" in ambiguous.stderr
    named = run([*script, "--repository", str(s.repository), "--model", RERANK, "--query", QUERY, *DOCUMENTS])
    assert named.returncode == 0, named.stderr
    logits = [row["logit"] for row in json.loads(named.stdout)["results"]]  # the ensemble's answer
    assert np.abs(np.array(logits) - cross_encoder_scores(s.reranker_source, DOCUMENTS, logits=True)).max() <= ATOL
    # A repository of one model names its model, as it always has.
    only = run([*script, "--repository", str(tiny_embedding_repo.repository), "a text"])
    assert only.returncode == 0 and json.loads(only.stdout)["model"] == s.embedder

    curl = ["bash", str(root / "clients" / "curl.sh")]
    ambiguous = run([*curl, "a text"], TRITON_HTTP_URL=e.http, TRITON_REPO=str(s.repository))
    assert ambiguous.returncode == 2
    assert f"lists several models ({s.embedder},{RERANK}): set TRITON_MODEL" in ambiguous.stderr
    named = run([*curl, *DOCUMENTS], TRITON_HTTP_URL=e.http, TRITON_REPO=str(s.repository), TRITON_MODEL=RERANK,
                QUERY=QUERY)
    assert named.returncode == 0 and json.loads(named.stdout)["model_name"] == RERANK
    only = run([*curl, "a text"], TRITON_HTTP_URL=e.http, TRITON_REPO=str(tiny_embedding_repo.repository))
    assert only.returncode == 0 and json.loads(only.stdout)["model_name"] == s.embedder


def test_the_api_finds_the_embedder_and_the_reranker_by_their_tasks(served: Served, tmp_path: Path) -> None:
    """OpenAI's embeddings and Cohere's rerank in front of the one server: without a model named, each route takes
    the repository's only model of its task."""
    import urllib.request

    from tritonize.api.child import ApiProcess
    from tritonize.runtime.machine import free_ports

    s = served.stack
    (port,) = free_ports(1)

    def post(url: str, path: str, body: dict) -> dict:
        request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310 - the test's own API
            return json.loads(answer.read())

    with ApiProcess(s.repository, served.endpoints.grpc, port=port, log_file=tmp_path / "api.log") as url:
        embedded = post(url, "/v1/embeddings", {"input": TEXTS})
        reranked = post(url, "/v1/rerank", {"query": QUERY, "documents": DOCUMENTS})
    with TextClient(served.endpoints.grpc, s.embedder) as client:
        expected = client.embed(TEXTS)
    assert embedded["model"] == s.embedder
    assert np.abs(np.array([d["embedding"] for d in embedded["data"]]) - expected).max() <= ATOL
    scores = {r["index"]: r["relevance_score"] for r in reranked["results"]}
    reference = cross_encoder_scores(s.reranker_source, DOCUMENTS)
    assert max(abs(scores[i] - reference[i]) for i in range(len(DOCUMENTS))) <= ATOL


def test_a_supervised_server_serves_a_model_added_while_it_runs(tiny_embedding_repo, local_options, local_triton,
                                                                 tmp_path: Path) -> None:
    """The server keeps the models it loaded; the added model's health check fails until it restarts. The
    supervisor checks a changed repository at once and restarts the server once, onto both models, without
    waiting for three failed checks."""
    import time

    from support.tiny_models import build_classifier

    repo = tmp_path / "repo"
    shutil.copytree(tiny_embedding_repo.repository, repo, ignore=shutil.ignore_patterns("__pycache__"))
    runtime = LocalRuntime(local_options(repo, tmp_path / "run"), quiet=True, supervise=True)
    endpoints = runtime.up()
    try:
        source = build_classifier(tmp_path / "cls-src")
        generate(GenerateOptions(model=str(source), name="sentiment", output=str(repo), add=True))
        added = time.monotonic()
        deadline = added + 90.0
        supervisor_log = runtime.directory / "supervisor.log"
        # Ready after a restart, and the supervisor done with it: the server answers before the supervisor logs.
        while not ((status := runtime.status()).ready and status.restarts and "restarted" in supervisor_log.read_text()):
            assert time.monotonic() < deadline, (status, supervisor_log.read_text())
            time.sleep(0.5)
        took = time.monotonic() - added
        print(f"served both models {took:.1f} s after the add")
        assert status.restarts == 1 and "sentiment answered" in status.health
        log = supervisor_log.read_text()
        # why: the added model did not answer before the restart, seen at the first look at the changed repository
        assert "the repository changed since the server started, and its health check fails" in log and "sentiment: HTTP" in log
        assert took < CHECK_S * FAILURES, log
        with TextClient(endpoints.grpc, "sentiment") as client:
            assert client.classify(["a fine day"], top_k=1)[0][0].label in ("negative", "neutral", "positive")
    finally:
        stop_later(runtime)


def test_versions_are_per_model(served: Served, tmp_path: Path) -> None:
    """A new version of the reranker joins its folders only, and a switch serves it while the embedder keeps
    serving, untouched."""
    s = served.stack
    embedder_files = {p: d for p, d in tree(s.repository).items() if p.split("/")[0].startswith(s.embedder)}
    embedder_entry = entries(yaml.safe_load((s.repository / MANIFEST_FILE).read_text()))[0]
    v2 = model_zoo.build_cross_encoder(tmp_path / "v2", "bert", seed=1)
    assert main(["generate", "--model", str(v2), "--output", str(s.repository), "--name", RERANK, "--version", "2"]) == 0
    assert versions(s.repository, RERANK) == [1, 2] and versions(s.repository, s.embedder) == [1]
    assert read_manifest(s.repository, RERANK).version == 2
    assert entries(yaml.safe_load((s.repository / MANIFEST_FILE).read_text()))[0] == embedder_entry
    assert {p: d for p, d in tree(s.repository).items() if p.split("/")[0].startswith(s.embedder)} == embedder_files
    done = served.runtime.switch(RERANK)
    assert done.changed and done.version == 2 and done.previous == (1,)
    expected, before = cross_encoder_scores(v2, DOCUMENTS), cross_encoder_scores(s.reranker_source, DOCUMENTS)
    assert np.abs(expected - before).max() > 20 * ATOL  # the two versions answer apart
    with TextClient(served.endpoints.grpc, RERANK) as client:
        scores = client.rerank(QUERY, DOCUMENTS)
    assert np.abs(scores - expected).max() <= ATOL
    with TextClient(served.endpoints.grpc, s.embedder) as client:
        assert client.embed(TEXTS).shape == (len(TEXTS), 32)
    assert health.probe_file(served.endpoints.http, str(s.repository / health.HEALTH_FILE)).ok
