"""MiniLM tokenized inside its ONNX graph (`generate --tokenizer graph`), served on Triton's native onnxruntime
backend, answers as the two-step ensemble (a Python tokenizer step, then the model step) of the same model: both
in one repository, behind one production server. Beside them the layout a GPU gets (the tokenizer's graph a
step of its own on the CPU), its model step moved to the CPU here."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from support.stopping import stop_later
from tritonize import graph_tokenizer
from tritonize.generate import generate
from tritonize.repository import parse_config
from tritonize.runtime.local import LocalRuntime
from tritonize.spec import CONFIG_FILE, GRAPH_MODEL_FILE, PRODUCTION_VARIANT, TOKENIZER_GRAPH_FILE
from tritonize.spec.options import GenerateOptions

GRAPH, STEPS, SPLIT = "minilm_graph", "minilm", "minilm_split"
TEXTS = ["A man is eating food.", "Café déjà vu: naïve résumé.", "東京は日本の首都です。",
         "[CLS] written [SEP] in the text", "tabs\tand\nnewlines", "word " * 400]
START_TIMEOUT_S = 120


@pytest.fixture(scope="module")
def served(minilm_folder, minilm_repo, local_options, tmp_path_factory):
    """The session's MiniLM repository (the two steps, named STEPS) copied, with the graph layouts added."""
    base = tmp_path_factory.mktemp("graphtok")
    repo = base / "repo"
    shutil.copytree(minilm_repo, repo, ignore=shutil.ignore_patterns("__pycache__"))
    generate(GenerateOptions(model=str(minilm_folder), name=GRAPH, output=str(repo), tokenizer="graph", add=True))
    # What a GPU gets, in fp32 as the others: its model step's KIND_GPU made KIND_CPU, the one change (no GPU here)
    generate(GenerateOptions(model=str(minilm_folder), name=SPLIT, output=str(repo), add=True, tokenizer="graph",
                             device="gpu", precision="fp32", optimize=False))
    for config in (repo / f"{SPLIT}_model").glob("**/*.pbtxt"):
        config.write_text(config.read_text().replace("kind: KIND_GPU", "kind: KIND_CPU"))
    runtime = LocalRuntime(local_options(repo, base / "run", timeout_s=START_TIMEOUT_S), quiet=True,
                           variant=PRODUCTION_VARIANT)
    endpoints = runtime.up()
    try:
        yield repo, grpcclient.InferenceServerClient(endpoints.grpc)
    finally:
        stop_later(runtime)


def _infer(client, model: str, texts: list[str]) -> dict[str, np.ndarray]:
    text = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    text.set_data_from_numpy(np.array(texts, dtype=object).reshape(-1, 1))
    result = client.infer(model, [text])
    return {name: result.as_numpy(name) for name in ("embedding", "tokens", "truncated")}


def test_the_graph_layout_is_what_the_server_loaded(served) -> None:
    repo, client = served
    config = client.get_model_config(f"{GRAPH}_model", as_json=True)["config"]
    assert (config["platform"], config["default_model_filename"]) == ("onnxruntime_onnx", GRAPH_MODEL_FILE)
    assert [i["name"] for i in config["input"]] == ["TEXT"]
    ensemble = parse_config((repo / GRAPH / "config.pbtxt").read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [f"{GRAPH}_model"]


@pytest.mark.parametrize("batched", [True, False], ids=["one-request", "each-alone"])
def test_in_graph_answers_equal_the_two_step_ensembles(served, batched: bool) -> None:
    _, client = served
    groups = [TEXTS] if batched else [[t] for t in TEXTS]
    for texts in groups:
        graph, steps = _infer(client, GRAPH, texts), _infer(client, STEPS, texts)
        np.testing.assert_allclose(graph["embedding"], steps["embedding"], rtol=0, atol=1e-6)
        assert np.array_equal(graph["tokens"], steps["tokens"]), texts
        assert np.array_equal(graph["truncated"], steps["truncated"]), texts
    assert _infer(client, GRAPH, ["word " * 400])["truncated"].all()


def test_the_adversarial_set_gets_the_two_steps_tokens(served) -> None:
    _, client = served
    texts = [t for t in graph_tokenizer.ADVERSARIAL_TEXTS if t.strip()]  # the Python step refuses blank texts
    graph, steps = _infer(client, GRAPH, texts), _infer(client, STEPS, texts)
    assert np.array_equal(graph["tokens"], steps["tokens"]) and np.array_equal(graph["truncated"], steps["truncated"])
    np.testing.assert_allclose(graph["embedding"], steps["embedding"], rtol=0, atol=1e-6)


def test_what_only_the_python_step_refuses_the_graph_answers_and_keeps_serving(served) -> None:
    """The tokenizer step's request checks (serving/texts.py: blank texts, invalid UTF-8, the byte bound) have no
    place in a graph: the in-graph model step answers such texts (docs/options.md says so), and serves on."""
    _, client = served
    for texts in ([b"   "], [b"ok \xc3"]):
        with pytest.raises(InferenceServerException, match="INVALID_ARG"):
            _infer(client, STEPS, texts)
        assert _infer(client, GRAPH, texts)["tokens"].shape == (1, 1)
    assert _infer(client, GRAPH, ["still serving"])["tokens"][0, 0] == 4


def test_a_gpus_layout_tokenizes_in_a_graph_step_of_its_own_and_answers_as_the_two_steps(served) -> None:
    repo, client = served
    config = client.get_model_config(f"{SPLIT}_tokenizer", as_json=True)["config"]
    assert (config["platform"], config["default_model_filename"]) == ("onnxruntime_onnx", TOKENIZER_GRAPH_FILE)
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    ensemble = parse_config((repo / SPLIT / CONFIG_FILE).read_text())
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [f"{SPLIT}_tokenizer", f"{SPLIT}_model"]
    texts = [t for t in graph_tokenizer.ADVERSARIAL_TEXTS if t.strip()] + TEXTS + [""]
    split = _infer(client, SPLIT, texts)
    steps = _infer(client, STEPS, texts[:-1])  # the Python step refuses a blank text; the graph answers it
    assert np.array_equal(split["tokens"][:-1], steps["tokens"]) and split["tokens"][-1] == 2
    assert np.array_equal(split["truncated"][:-1], steps["truncated"])
    np.testing.assert_allclose(split["embedding"][:-1], steps["embedding"], rtol=0, atol=1e-6)
    words = _infer(client, SPLIT, ["the man", "a the"])  # every word held whole: no word goes to WordPiece
    np.testing.assert_allclose(words["embedding"], _infer(client, STEPS, ["the man", "a the"])["embedding"], rtol=0, atol=1e-6)
