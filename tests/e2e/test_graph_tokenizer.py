"""MiniLM as `generate` writes it by default (the tokenizer in ONNX graphs, no Python per request), served on
Triton's native onnxruntime backend, answers as the Python tokenizer step's two-step ensemble of the same model:
both in one repository, behind one server. Beside them the layout a GPU gets (the tokenizer's graph a step of its
own on the CPU), its model step moved to the CPU here. And the operator library loads where nothing is set up for
it: a tritonserver started with an empty environment, from another working directory."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from support.stopping import stop_later
from tritonize import graph_tokenizer
from tritonize.generate import generate
from tritonize.graph_tokenizer import texts as checks
from tritonize.repository import parse_config
from tritonize.runtime.local import LocalRuntime
from tritonize.runtime.local.server import TritonProcess
from tritonize.runtime.local.wheel import find_install
from tritonize.runtime.base import ServerOptions
from tritonize.runtime.machine import free_ports
from tritonize.spec import CONFIG_FILE, GRAPH_LIBRARY_FILE, GRAPH_MODEL_FILE, PRODUCTION_VARIANT, TOKENIZER_GRAPH_FILE
from tritonize.spec.options import GenerateOptions

GRAPH, STEPS, SPLIT = "minilm", "minilm_py", "minilm_split"
TEXTS = ["A man is eating food.", "Café déjà vu: naïve résumé.", "東京は日本の首都です。",
         "[CLS] written [SEP] in the text", "tabs\tand\nnewlines", "word " * 400]
START_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def served(minilm_folder, minilm_repo, local_options, tmp_path_factory):
    """The session's MiniLM repository (the default layout, named GRAPH) copied, with the Python step's layout
    and a GPU's added."""
    base = tmp_path_factory.mktemp("graphtok")
    repo = base / "repo"
    shutil.copytree(minilm_repo, repo, ignore=shutil.ignore_patterns("__pycache__"))
    generate(GenerateOptions(model=str(minilm_folder), name=STEPS, output=str(repo), tokenizer="python", add=True))
    # What a GPU gets, in fp32 as the others: its model step's KIND_GPU made KIND_CPU, the one change (no GPU here)
    generate(GenerateOptions(model=str(minilm_folder), name=SPLIT, output=str(repo), add=True, device="gpu",
                             precision="fp32", optimize=False))
    for config in (repo / f"{SPLIT}_model").glob("**/*.pbtxt"):
        config.write_text(config.read_text().replace("kind: KIND_GPU", "kind: KIND_CPU"))
    runtime = LocalRuntime(local_options(repo, base / "run", timeout_s=START_TIMEOUT_S), quiet=True,
                           variant=PRODUCTION_VARIANT)
    endpoints = runtime.up()
    try:
        yield repo, grpcclient.InferenceServerClient(endpoints.grpc), endpoints.grpc
    finally:
        stop_later(runtime)


def _infer(client, model: str, texts: list) -> dict[str, np.ndarray]:
    text = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    text.set_data_from_numpy(np.array(texts, dtype=object).reshape(-1, 1))
    result = client.infer(model, [text])
    return {name: result.as_numpy(name) for name in ("embedding", "tokens", "truncated")}


def test_the_graph_layout_is_what_the_server_loaded(served) -> None:
    repo, client, _ = served
    config = client.get_model_config(f"{GRAPH}_model", as_json=True)["config"]
    assert (config["platform"], config["default_model_filename"]) == ("onnxruntime_onnx", GRAPH_MODEL_FILE)
    assert [i["name"] for i in config["input"]] == ["TEXT"]
    ensemble = parse_config((repo / GRAPH / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [f"{GRAPH}_tokenizer", f"{GRAPH}_model"]
    assert not [p for step in (GRAPH, f"{GRAPH}_tokenizer", f"{GRAPH}_model") for p in (repo / step).glob("**/*.py")]


@pytest.mark.parametrize("batched", [True, False], ids=["one-request", "each-alone"])
def test_in_graph_answers_equal_the_two_step_ensembles(served, batched: bool) -> None:
    _, client, _ = served
    groups = [TEXTS] if batched else [[t] for t in TEXTS]
    for texts in groups:
        graph, steps = _infer(client, GRAPH, texts), _infer(client, STEPS, texts)
        np.testing.assert_allclose(graph["embedding"], steps["embedding"], rtol=0, atol=1e-6)
        assert np.array_equal(graph["tokens"], steps["tokens"]), texts
        assert np.array_equal(graph["truncated"], steps["truncated"]), texts
    assert _infer(client, GRAPH, ["word " * 400])["truncated"].all()


def test_the_adversarial_set_gets_the_two_steps_tokens(served) -> None:
    _, client, _ = served
    texts = [t for t in graph_tokenizer.ADVERSARIAL_TEXTS if t.strip()]  # both refuse blank texts
    graph, steps = _infer(client, GRAPH, texts), _infer(client, STEPS, texts)
    assert np.array_equal(graph["tokens"], steps["tokens"]) and np.array_equal(graph["truncated"], steps["truncated"])
    np.testing.assert_allclose(graph["embedding"], steps["embedding"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", ["blank", "utf8", "size"])
def test_what_the_python_step_refuses_the_texts_step_refuses_alone_and_the_server_serves_on(served, case: str) -> None:
    """Blank texts, invalid UTF-8 and requests over the byte bound: refused by both layouts, each saying what
    was refused; a request refused beside others in flight fails alone."""
    _, client, _ = served
    body = {"blank": [b"   "], "utf8": [b"ok \xc3\x28"], "size": [b"x" * (2 * 1024 * 1024 + 1)]}[case]
    said = {"blank": checks.BLANK, "utf8": checks.NOT_UTF8, "size": "more bytes of text than this server's limit"}[case]
    for model in (STEPS, GRAPH):
        with pytest.raises(InferenceServerException) as refused:
            _infer(client, model, body)
        if model == GRAPH:
            assert said in str(refused.value)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:  # good requests beside a refused one, at once: all answered
        good = [pool.submit(_infer, client, GRAPH, ["still serving", "a second text"]) for _ in range(16)]
        bad = pool.submit(_infer, client, GRAPH, body)
        assert all(f.result()["tokens"].tolist() == [[4], [5]] for f in good)
        with pytest.raises(InferenceServerException):
            bad.result()


def test_a_gpus_layout_tokenizes_in_a_graph_step_of_its_own_and_answers_as_the_two_steps(served) -> None:
    repo, client, _ = served
    config = client.get_model_config(f"{SPLIT}_tokenizer", as_json=True)["config"]
    assert (config["platform"], config["default_model_filename"]) == ("onnxruntime_onnx", TOKENIZER_GRAPH_FILE)
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    ensemble = parse_config((repo / SPLIT / CONFIG_FILE).read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [f"{SPLIT}_tokenizer", f"{SPLIT}_model"]
    texts = [t for t in graph_tokenizer.ADVERSARIAL_TEXTS if t.strip()] + TEXTS
    split, steps = _infer(client, SPLIT, texts), _infer(client, STEPS, texts)
    assert np.array_equal(split["tokens"], steps["tokens"]) and np.array_equal(split["truncated"], steps["truncated"])
    np.testing.assert_allclose(split["embedding"], steps["embedding"], rtol=0, atol=1e-6)
    words = _infer(client, SPLIT, ["the man", "a the"])  # every word held whole: no word goes to WordPiece
    np.testing.assert_allclose(words["embedding"], _infer(client, STEPS, ["the man", "a the"])["embedding"], rtol=0, atol=1e-6)
    with pytest.raises(InferenceServerException, match="blank text"):
        _infer(client, SPLIT, [""])


def test_the_api_refuses_what_the_graph_cannot_read_and_serves_on(served) -> None:
    """A NUL character (the graph would read only up to it), a cut at the start and windows (request parameters
    no graph reads): refused for the graph layout with one line each, served by the Python step's; the graph
    serves on."""
    from support.api import start_api, stop

    repo, _, grpc = served
    api = start_api(repo, grpc)
    try:
        asks = {"nul": ("/v1/embeddings", {"input": ["fine", "before\x00after"]}, 422, "NUL character"),
                "left": ("/embed", {"inputs": "word " * 400, "truncation_direction": "left"}, 400, "ONNX graphs"),
                "windows": ("/v1/embeddings", {"input": ["word " * 400], "enable_chunked_processing": True}, 400,
                            "ONNX graphs")}
        for path, body, status, said in asks.values():
            refused = api.call("POST", path, {"model": GRAPH, **body})
            assert refused[0] == status and said in json.dumps(refused[2]), refused
            assert api.call("POST", path, {"model": STEPS, **body})[0] == 200
        answered = api.call("POST", "/v1/embeddings", {"model": GRAPH, "input": ["fine", "still serving"]})
        assert answered[0] == 200 and len(answered[2]["data"]) == 2
    finally:
        stop(api)


def test_a_server_with_an_empty_environment_in_another_folder_loads_the_operator_library(minilm_folder, minilm_repo,
                                                                                           tmp_path) -> None:
    """No variable set, no link beside it: the tokenizer graphs name the library by its bare name, and the
    server finds it beside its onnxruntime backend (libonnxruntime's RUNPATH is $ORIGIN)."""
    install = find_install()
    instance = tmp_path / "instance"
    instance.mkdir()
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(repository=minilm_repo, http_port=http, grpc_port=grpc, metrics_port=metrics)
    backends = TritonProcess(options, instance, None, None, print, True).prepare_backend(install)
    assert (backends / "onnxruntime" / GRAPH_LIBRARY_FILE).read_bytes() == \
        (minilm_repo / "minilm_model" / GRAPH_LIBRARY_FILE).read_bytes()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = [str(install.server), f"--model-repository={minilm_repo}", f"--backend-directory={backends}",
               "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
               f"--http-port={http}", f"--grpc-port={grpc}", f"--metrics-port={metrics}", "--model-control-mode=none"]
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(command, cwd=elsewhere, env={}, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http}/v2/health/ready", timeout=2) as ready:
                    if ready.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
        tokenizer = Tokenizer.from_file(str(minilm_folder / "tokenizer.json"))
        tokenizer.no_padding()
        tokens = len(tokenizer.encode("Triton serves raw strings.").ids)
        assert _infer(client, "minilm", ["Triton serves raw strings."])["tokens"].tolist() == [[tokens]]
    finally:
        server.terminate()
        server.wait(timeout=60)
