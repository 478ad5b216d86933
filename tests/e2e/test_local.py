"""End to end on the real local Triton: raw strings in over gRPC, HTTP and curl, compared with PyTorch.

One server per generated repository (tiny embedding model, tiny classifier),
on free loopback ports, shared by the module and stopped by its last test.
The MiniLM test generates the real all-MiniLM-L6-v2 repository (slow).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from support import REPO_ROOT as ROOT
from support.stopping import serving, stop_later
from tritonize.client import AsyncTextClient, ServerError, TextClient, run_concurrent
from tritonize.runtime.base import Endpoints, http_get
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.machine import group_processes

ATOL = 1e-4
LONG_10K = " ".join(("the quick brown fox jumps over the lazy dog " * 1112).split()[:10_000])  # 44 KB
LONG_2500 = " ".join(LONG_10K.split()[:2_500])  # 11 KB: far past the max length
TEXTS = [
    "hello world",
    "the quick brown fox jumps over the lazy dog",
    "Ünïcödé café — 日本語のテキスト 🚀",
    "a",
    "machine learning in production: fast, raw strings " * 3,
    "word " * 200,  # past max_length (64): truncated
]


# -- references --------------------------------------------------------------


def st_embed(folder: Path, texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu")
    return model.encode(texts, convert_to_numpy=True, batch_size=16)


def torch_classify(folder: Path, texts: list[str], max_length: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Logits and softmax probabilities from transformers itself."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    logits = []
    with torch.no_grad():
        for text in texts:
            enc = tokenizer([text], truncation=True, max_length=max_length, return_tensors="pt")
            logits.append(model(**enc).logits.numpy())
    out = np.concatenate(logits)
    probs = np.exp(out - out.max(axis=1, keepdims=True))
    return out, probs / probs.sum(axis=1, keepdims=True)


# -- servers -----------------------------------------------------------------


@dataclass
class Served:
    runtime: LocalRuntime
    endpoints: Endpoints
    name: str
    source: Path
    pid: int

    def client(self, protocol: str = "grpc", **kw) -> TextClient:
        url = self.endpoints.grpc if protocol == "grpc" else self.endpoints.http
        return TextClient(url, kw.pop("model", self.name), protocol=protocol, **kw)


def serve(repo, local_options, run_dir: Path) -> Served:
    runtime = LocalRuntime(local_options(repo.repository, run_dir), quiet=True)
    endpoints = runtime.up()
    return Served(runtime, endpoints, repo.name, repo.source, runtime.server_pid)


@pytest.fixture(scope="module")
def servers(tiny_embedding_repo, tiny_classifier_repo, local_options, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    started: dict[str, Served] = {}
    try:
        started["emb"] = serve(tiny_embedding_repo, local_options, run_dir)
        started["cls"] = serve(tiny_classifier_repo, local_options, run_dir)
        yield started
    finally:
        stop_later(*(served.runtime for served in started.values()))


@pytest.fixture(scope="module")
def emb(servers) -> Served:
    return servers["emb"]


@pytest.fixture(scope="module")
def cls(servers) -> Served:
    return servers["cls"]


@pytest.fixture(scope="module")
def emb_reference(emb) -> np.ndarray:
    return st_embed(emb.source, TEXTS)


@pytest.fixture(scope="module")
def cls_reference(cls) -> tuple[np.ndarray, np.ndarray]:
    return torch_classify(cls.source, TEXTS)


def model_stats(endpoints: Endpoints, model: str) -> tuple[int, int]:
    """(inference_count, execution_count): rows served and batches executed."""
    code, body = http_get(f"{endpoints.http}/v2/models/{model}/stats")
    assert code == 200, body
    stats = json.loads(body)["model_stats"][0]
    return int(stats["inference_count"]), int(stats["execution_count"])


def still_serving(served: Served, protocol: str = "grpc") -> None:
    assert http_get(f"{served.endpoints.http}/v2/health/ready")[0] == 200
    with served.client(protocol) as client:
        assert np.isfinite(next(iter(client.infer(["still serving"]).values()))).all()


def assert_close(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.shape == expected.shape
    assert np.abs(got - expected).max() <= ATOL


# -- correctness over each protocol --------------------------------------------


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_embeddings_match_sentence_transformers(emb, emb_reference, protocol) -> None:
    with emb.client(protocol) as client:
        assert client.output_names() == ["embedding", "tokens", "truncated"]
        batched = client.embed(TEXTS)
        one_by_one = np.concatenate([client.embed([t]) for t in TEXTS])
    assert batched.dtype == np.float32
    assert_close(batched, emb_reference)
    assert_close(one_by_one, emb_reference)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_classifier_matches_transformers(cls, cls_reference, protocol) -> None:
    logits, probs = cls_reference
    with cls.client(protocol) as client:
        out = client.infer(TEXTS)
        top = client.classify(TEXTS, top_k=3)
    assert_close(out["logits"], logits)
    assert_close(out["probabilities"], probs)
    labels = ["negative", "neutral", "positive"]
    for row, expected in zip(top, probs):
        assert [lb.label for lb in row][0] == labels[int(expected.argmax())]
        assert sorted(lb.label for lb in row) == labels
        assert abs(row[0].score - expected.max()) <= ATOL


def test_curl_sends_plain_json(emb, cls, emb_reference, cls_reference) -> None:
    def curl(served: Served, texts: list[str], **env: str) -> dict:
        result = subprocess.run(
            ["bash", str(ROOT / "clients" / "curl.sh"), *texts],
            env={**os.environ, "TRITON_HTTP_URL": served.endpoints.http, "TRITON_MODEL": served.name, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return {o["name"]: o for o in json.loads(result.stdout)["outputs"]}

    texts = [*TEXTS, 'quotes "inside" and a back\\slash', "tab\tand\nnewline"]
    reference = np.concatenate([emb_reference, st_embed(emb.source, texts[len(TEXTS) :])])
    out = curl(emb, texts)["embedding"]
    assert out["shape"] == [len(texts), 32]
    assert_close(np.array(out["data"], dtype=np.float32).reshape(out["shape"]), reference)

    top = curl(cls, TEXTS, TOP_K="1")["probabilities"]
    labels = [cell.split(":")[2] for cell in top["data"]]
    expected = ["negative", "neutral", "positive"]
    assert labels == [expected[int(i)] for i in cls_reference[1].argmax(axis=1)]

    bad = subprocess.run(
        ["bash", str(ROOT / "clients" / "curl.sh"), ""],
        env={**os.environ, "TRITON_HTTP_URL": cls.endpoints.http, "TRITON_MODEL": cls.name},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "empty or blank text" in json.loads(bad.stdout)["error"]


# -- bad input: a clear error or a correct answer, and the server keeps serving --


# The default repository checks texts in its texts step, a graph (docs/options.md): its refusals name the
# check, not the row; the Python step's name the row (tests/e2e/test_reliability.py serves it too).
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_empty_string_is_rejected(emb, protocol) -> None:
    with emb.client(protocol) as client, pytest.raises(ServerError, match=r"TEXT holds an empty or blank text: send"):
        client.embed([""])
    still_serving(emb, protocol)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_invalid_utf8_is_rejected(emb, protocol) -> None:
    with emb.client(protocol) as client, pytest.raises(ServerError, match=r"TEXT holds a text that is not valid UTF-8"):
        client.embed(["fine", b"caf\xe9 \xff\xfe"])
    still_serving(emb, protocol)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_a_long_text_is_truncated_and_a_huge_request_refused(emb, protocol) -> None:
    """Past the max length a text is truncated, however long it is, as sentence-transformers truncates it; past
    the request bound (2 MiB of text) the request is refused by size, before it is decoded (docs/reliability.md)."""
    with emb.client(protocol) as client:
        got = client.embed([LONG_2500, LONG_10K])
        with pytest.raises(ServerError, match=r"the request carries more bytes of text than this server's limit "
                                              r"of 2097152 bytes per request"):
            client.embed(["x" * (1024 * 1024), "y" * (1024 * 1024 + 1)])
    assert_close(got, st_embed(emb.source, [LONG_2500, LONG_10K]))
    still_serving(emb, protocol)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_batch_mixing_short_and_long_texts(emb, protocol) -> None:
    texts = ["hi", LONG_2500, "a short one", "word " * 40, "x"]
    with emb.client(protocol) as client:
        got = client.embed(texts)
    assert_close(got, st_embed(emb.source, texts))
    still_serving(emb, protocol)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_wrong_input_name_is_rejected(emb, protocol) -> None:
    with emb.client(protocol, input_name="TEXTS") as client, pytest.raises(ServerError) as info:
        client.embed(["hello"])
    assert "unexpected inference input 'TEXTS'" in str(info.value)
    still_serving(emb, protocol)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_unknown_model_is_rejected(emb, protocol) -> None:
    with emb.client(protocol, model="no_such_model") as client, pytest.raises(ServerError) as info:
        client.embed(["hello"])
    assert "no_such_model" in str(info.value) and "not found" in str(info.value)
    assert info.value.status in ("StatusCode.NOT_FOUND", "404", "400")
    still_serving(emb, protocol)


def test_bad_requests_fail_alone_inside_busy_batches(emb) -> None:
    """Dynamic batching mixes requests: one bad text must not fail its neighbours."""
    requests = [[""] if i % 6 == 0 else [TEXTS[i % len(TEXTS)]] for i in range(48)]
    results = run_concurrent(emb.endpoints.grpc, emb.name, requests, concurrency=48)
    reference = st_embed(emb.source, TEXTS)
    for i, res in enumerate(results):
        if i % 6 == 0:
            assert res.error is not None and "empty or blank text" in str(res.error)
        else:
            assert res.ok, res.error
            assert_close(res.outputs["embedding"], reference[i % len(TEXTS)][None])


# -- concurrency and batching ------------------------------------------------


def test_concurrent_mixed_lengths_are_batched(emb) -> None:
    words = "the quick brown fox jumps over the lazy dog hello world triton server".split()
    texts = [" ".join(words[j % len(words)] for j in range(1 + (i * 7) % 60)) for i in range(96)]
    steps = [f"{emb.name}_tokenizer", f"{emb.name}_model"]
    before = {m: model_stats(emb.endpoints, m) for m in steps}
    # The texts step runs each request on its own; the model step batches texts of any length together.
    texts_step, model = steps

    async def fire() -> list:
        async with AsyncTextClient(emb.endpoints.grpc, emb.name) as client:
            return await client.infer_many([[t] for t in texts], concurrency=64)

    results = asyncio.run(fire())
    assert all(r.ok for r in results), [str(r.error) for r in results if not r.ok][:3]
    got = np.concatenate([r.outputs["embedding"] for r in results])
    assert_close(got, st_embed(emb.source, texts))

    checked = [a - b for a, b in zip(model_stats(emb.endpoints, texts_step), before[texts_step])]
    assert checked == [len(texts), len(texts)]
    inferences, executions = (a - b for a, b in zip(model_stats(emb.endpoints, model), before[model]))
    print(f"{model}: {executions} batches for {inferences} requests")
    assert inferences == len(texts)
    assert executions < len(texts), f"{executions} batches for {len(texts)} requests"


def test_the_graph_runs_nicer_than_the_step_that_admits_requests(tiny_python_repo, local_options, tmp_path) -> None:
    """In the fused step's stub (the Python tokenizer step's layout) the graph's threads (the worker,
    onnxruntime's) run GRAPH_NICE steps nicer than its main thread, which admits and refuses requests in
    execute(): under overload refusals keep their core."""
    from tritonize.serving.fused_step import GRAPH_NICE
    from tritonize.serving.procfs import stat_fields

    emb = serve(tiny_python_repo, local_options, tmp_path / "run")
    try:
        with emb.client("grpc") as client:
            assert np.isfinite(client.infer(["a text"])["embedding"]).all()
        stubs = [p for p in group_processes(emb.pid)
                 if f"{emb.name}_model" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
        assert len(stubs) == 1, stubs
        tasks = {int(t.name): int(stat_fields(t / "stat")[16]) for t in Path(f"/proc/{stubs[0]}/task").iterdir()}
        main = tasks[stubs[0]]
        nicer = [tid for tid, n in tasks.items() if n == min(19, main + GRAPH_NICE)]
        assert len(nicer) >= (2 if (os.cpu_count() or 1) > 1 else 1), tasks  # the worker, onnxruntime's helpers
        assert main < min(19, main + GRAPH_NICE), tasks
    finally:
        stop_later(emb.runtime)


def test_threaded_http_client(emb) -> None:
    with emb.client("http") as client:
        results = client.infer_many([[t] for t in TEXTS * 4], concurrency=8)
    assert all(r.ok for r in results)
    assert_close(np.concatenate([r.outputs["embedding"] for r in results]), np.tile(st_embed(emb.source, TEXTS), (4, 1)))


# -- the client scripts ------------------------------------------------------


def script(name: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "clients" / name), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.mark.parametrize("name", ["grpc_client.py", "http_client.py", "async_grpc_client.py"])
def test_client_scripts_print_embeddings(emb, emb_reference, name) -> None:
    url = emb.endpoints.http if name.startswith("http") else emb.endpoints.grpc
    result = script(name, "--url", url, "--model", emb.name, "--json", "-c", "3", "-b", "2", *TEXTS)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    assert [r["text"] for r in rows] == TEXTS
    assert_close(np.array([r["embedding"] for r in rows], dtype=np.float32), emb_reference)

    human = script(name, "--url", url, "--model", emb.name, stdin="hello world\nshort\n")
    assert human.returncode == 0, human.stderr
    assert human.stdout.startswith("[0] dim 32") and "'short'" in human.stdout


def test_client_script_prints_labels_and_errors(cls, cls_reference) -> None:
    result = script("grpc_client.py", "--url", cls.endpoints.grpc, "--model", cls.name, "--json", "--top-k", "2", *TEXTS)
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["results"]
    expected = ["negative", "neutral", "positive"]
    assert [r["labels"][0]["label"] for r in rows] == [expected[int(i)] for i in cls_reference[1].argmax(axis=1)]
    assert all(len(r["labels"]) == 2 for r in rows)

    bad = script("http_client.py", "--url", cls.endpoints.http, "--model", cls.name, "")
    assert bad.returncode == 1 and "empty or blank text" in bad.stderr


# -- stop ----------------------------------------------------------------------


def test_down_leaves_no_process(tiny_embedding_repo, tiny_classifier_repo, local_options, tmp_path) -> None:
    """Servers of its own, so no other test depends on running before or after it."""
    for repo in (tiny_embedding_repo, tiny_classifier_repo):
        served = serve(repo, local_options, tmp_path / "run")
        assert group_processes(served.pid)  # server and stubs are running ...
        served.runtime.down()
        assert group_processes(served.pid) == []  # ... and gone, stubs included
        assert http_get(f"{served.endpoints.http}/v2/health/live")[0] == 0


# -- all-MiniLM-L6-v2 ------------------------------------------------------------


@pytest.mark.slow
def test_minilm_served_matches_sentence_transformers(minilm_folder, minilm_repo, local_options, tmp_path) -> None:
    folder, repo = minilm_folder, minilm_repo
    texts = [
        *TEXTS,
        " ".join(["sentence"] * 200),  # between 128 and 256 tokens: must not be cut at 128
        LONG_2500,  # truncated at 256
    ]
    expected = st_embed(folder, texts)
    runtime = LocalRuntime(local_options(repo, tmp_path / "run"), quiet=True)
    with runtime as endpoints:
        pid = runtime.server_pid
        with TextClient(endpoints.grpc, "minilm") as grpc_client, TextClient(endpoints.http, "minilm", "http") as http:
            assert_close(grpc_client.embed(texts), expected)
            assert_close(np.concatenate([http.embed([t]) for t in texts]), expected)
        results = run_concurrent(endpoints.grpc, "minilm", [[t] for t in texts * 8], concurrency=64)
        assert all(r.ok for r in results)
        assert_close(np.concatenate([r.outputs["embedding"] for r in results]), np.tile(expected, (8, 1)))

        # `down` while the model step computes a large batch (tokenizing it takes milliseconds,
        # running it about a second): SIGTERM lets it finish.
        with ThreadPoolExecutor(1) as pool, TextClient(endpoints.grpc, "minilm") as client:
            sent_at = time.monotonic()
            in_flight = pool.submit(lambda: (client.embed([texts[-2]] * 64), time.monotonic()))
            time.sleep(0.3)
            sigterm_at = time.monotonic()
            runtime.down()
            embeddings, answered_at = in_flight.result()
        print(f"in-flight request: sent, SIGTERM +{sigterm_at - sent_at:.2f}s, answered +{answered_at - sent_at:.2f}s")
        assert answered_at > sigterm_at  # it was still running when the server was told to stop
        assert_close(embeddings[:1], expected[-2:-1])
    assert group_processes(pid) == []


@pytest.mark.slow
def test_minilm_serves_a_60_kb_page_as_sentence_transformers_embeds_it(minilm_folder, minilm_repo, long_page,
                                                                         local_options, tmp_path) -> None:
    """An ordinary long document (a web page) is embedded from its first 256 tokens, as sentence-transformers
    embeds it, beside short texts in the same request and alone."""
    assert len(long_page.encode()) > 60_000
    texts = ["a short text first", long_page, "and one after it"]
    expected = st_embed(minilm_folder, texts)
    with serving(LocalRuntime(local_options(minilm_repo, tmp_path / "run"), quiet=True)) as endpoints:
        with TextClient(endpoints.grpc, "minilm") as grpc_client, TextClient(endpoints.http, "minilm", "http") as http:
            assert_close(grpc_client.embed(texts), expected)
            assert_close(http.embed([long_page]), expected[1:2])

