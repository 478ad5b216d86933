"""The production configs served for real: each step's config.pbtxt (a Python tokenizer step, the model step on
Triton's native onnxruntime backend, the ensemble) on the wheel's tritonserver, as NVIDIA's container serves them.

Every task's ensemble answers as the fused one step (configs/fused.pbtxt) serving the same repository, and as the
model's own library; fp16 and int8 graphs load and answer on the native backend; a version switch, a killed
tokenizer stub and the reliability tests' bad requests go through the two-step path.

One repository holds a model of every head, so one production server and one fused server answer for all of them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import pytest

from support import model_zoo
from support import statistics as statistics_support
from support.reliability import (
    BAD_REQUESTS,
    RECOVERY_S,
    Traffic,
    assert_refused_and_still_serving,
    kill_dead,
    live_stub,
    recorded,
    stop_and_check,
    supervisor_log,
)
from support.sparse import TEXTS as SPARSE_TEXTS
from support.sparse import assert_same_terms
from support.sparse import encode as sparse_encode
from support.stopping import stop_later
from support.tasks import (
    DOCUMENTS,
    EMBED_TEXTS,
    NER_TEXTS,
    QA_PAIRS,
    QUERY,
    assert_same_answers,
    assert_same_entities,
    cross_encoder_scores,
    pipeline_entities,
    redraw_token_head,
    reference_answer,
    spread_qa_head,
)
from support.versions import TEXTS as VERSION_TEXTS
from support.versions import floor
from tritonize.chain import in_process
from tritonize.client import TextClient, rerank_inputs
from tritonize.generate import generate
from tritonize.manifest import read_manifest, read_manifests
from tritonize.runtime import instance
from tritonize.runtime.base import Endpoints, http_get
from tritonize.runtime.local import LocalRuntime
from tritonize.spec import FUSED_VARIANT, MODELS_KEY, PRODUCTION_VARIANT, VERIFICATION_FILE
from tritonize.spec.options import GenerateOptions

ATOL = 1e-4
pytestmark = pytest.mark.usefixtures("native_backend")
PROTOCOLS = ("grpc", "http")
VARIANTS = (PRODUCTION_VARIANT, FUSED_VARIANT)
START_TIMEOUT_S = 300.0  # a dozen models on a shared two-core machine

# zoo id -> generate options: every head the repository can serve.
ZOO = {
    "bert-st-mean": {},  # mean pooling; also the fp32 model of the fp16 and int8 graphs below
    "bert-st-cls": {},  # CLS pooling
    "qwen3-st-lasttoken": {},  # last-token pooling, left-padding tokenizer
    "gemma3-st-embeddinggemma": {"matryoshka_dims": [32, 16, 8]},  # mean -> two Dense, Matryoshka sizes
    "bert-seq-cls": {},  # single-label: a softmax
    "bert-seq-cls-multilabel": {},  # a sigmoid per label
    "bert-cross-encoder": {},
    "qwen3-llm-reranker": {},  # causal LM, chat template, yes/no logits
    "bert-token-cls": {"aggregation": "simple"},  # a post step decodes entities
    "bert-qa": {},  # the first step calls the model step itself, one window at a time
    "bert-splade": {},  # a post step keeps the non-zero terms
}
EMBEDDERS = ("bert-st-mean", "bert-st-cls", "qwen3-st-lasttoken", "gemma3-st-embeddinggemma")
FP32 = "bert-st-mean"
PRECISIONS = {"emb_fp16": "fp16", "emb_int8": "int8"}  # model name -> precision, both of FP32's folder


def model_name(zoo_id: str) -> str:
    return zoo_id.replace("-", "_")


# Held to the fused step's answers within ATOL. Not int8: dynamic quantization scales the activations of the whole
# tensor, padding included, and the two variants pad differently (test_int8_...).
COMPARED = [model_name(z) for z in ZOO] + ["emb_fp16"]


# What each task is asked, as one request of several rows (long texts among them: cut, or windowed).
REQUESTS = {
    "embedding": {"TEXT": EMBED_TEXTS},
    "classification": {"TEXT": EMBED_TEXTS},
    "sparse-embedding": {"TEXT": SPARSE_TEXTS},
    "rerank": rerank_inputs(QUERY, DOCUMENTS),
    "token-classification": {"TEXT": NER_TEXTS},
    "question-answering": {"QUESTION": [q for q, _ in QA_PAIRS], "CONTEXT": [c for _, c in QA_PAIRS]},
}
FIGURES: dict[str, dict[str, float]] = {"vs fused": {}, "vs library": {}}  # printed as they are measured


def record(kind: str, key: str, value: float) -> None:
    FIGURES[kind][key] = max(value, FIGURES[kind].get(key, 0.0))
    print(f"\n{kind} {key}: max-abs {value:.3g}")


@dataclass
class Stack:
    repository: Path
    folders: dict[str, Path]  # zoo id -> its folder
    endpoints: dict[str, Endpoints]  # variant -> the server serving it
    runtimes: dict[str, LocalRuntime]

    def client(self, variant: str, model: str, protocol: str) -> TextClient:
        endpoints = self.endpoints[variant]
        return TextClient(endpoints.grpc if protocol == "grpc" else endpoints.http, model, protocol=protocol)

    def task(self, model: str) -> str:
        return read_manifest(self.repository, model).model.task


@pytest.fixture(scope="module")
def stack(local_options, tmp_path_factory):
    """Every ZOO model (and FP32's fp16 and int8 graphs) in one repository, served by one server on the production
    configs and one on the fused one step."""
    base = tmp_path_factory.mktemp("production")
    repo = base / "repo"
    folders = {}
    for i, (zoo_id, options) in enumerate(ZOO.items()):
        folders[zoo_id] = folder = model_zoo.build(zoo_id, base / "zoo")
        if zoo_id.endswith("token-cls"):
            redraw_token_head(folder)
        if zoo_id.endswith("-qa"):
            spread_qa_head(folder)
        generate(GenerateOptions(model=str(folder), name=model_name(zoo_id), output=str(repo), add=i > 0, **options))
    for name, precision in PRECISIONS.items():
        generate(GenerateOptions(model=str(folders[FP32]), name=name, output=str(repo), add=True, precision=precision))
    runtimes: dict[str, LocalRuntime] = {}
    endpoints: dict[str, Endpoints] = {}
    try:
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=len(VARIANTS)) as pool:  # the two servers load side by side
            for variant in VARIANTS:
                runtimes[variant] = LocalRuntime(local_options(repo, base / "run", timeout_s=START_TIMEOUT_S),
                                                 quiet=True, variant=variant)
            starts = {variant: pool.submit(runtime.up) for variant, runtime in runtimes.items()}
            endpoints = {variant: up.result() for variant, up in starts.items()}
        print(f"\nboth servers for {len(read_manifests(repo))} models ready in {time.monotonic() - start:.1f}s")
        yield Stack(repo, folders, endpoints, runtimes)
    finally:
        stop_later(*runtimes.values())
        print("\nproduction vs fused, max-abs: " + json.dumps(FIGURES["vs fused"], indent=1))
        print("production vs library, max-abs: " + json.dumps(FIGURES["vs library"], indent=1))


# -- the two servers ------------------------------------------------------------------------------


def step_config(endpoints: Endpoints, step: str) -> dict:
    code, body = http_get(f"{endpoints.http}/v2/models/{step}/config")
    assert code == 200, body
    return json.loads(body)


def test_the_model_steps_run_on_the_native_backend(stack: Stack) -> None:
    """What each server loaded: the production server's model steps are onnxruntime_onnx with no Python stub,
    the fused server's are Python steps."""
    names = [m.name for m in read_manifests(stack.repository)]
    assert sorted(names) == sorted(COMPARED + ["emb_int8"])
    for variant, runtime in stack.runtimes.items():
        assert f"{variant} configs" in runtime.status().detail
    graphs = in_graph(stack)  # their texts steps are graphs too, and both variants serve them as production
    for name in names:
        production = step_config(stack.endpoints[PRODUCTION_VARIANT], f"{name}_model")
        assert (production["platform"], production["backend"]) == ("onnxruntime_onnx", "onnxruntime"), production
        python = "onnxruntime" if name in graphs else "python"
        assert step_config(stack.endpoints[PRODUCTION_VARIANT], f"{name}_tokenizer")["backend"] == python
        assert step_config(stack.endpoints[FUSED_VARIANT], f"{name}_model")["backend"] == python
    stubs = set(instance.stub_models(stack.runtimes[PRODUCTION_VARIANT].server_pid).values())
    assert not {s for s in stubs if s.endswith("_model")}, stubs  # no Python stub runs a graph
    assert {f"{name}_tokenizer" for name in names if name not in graphs} <= stubs
    assert not {s for s in stubs if s.removesuffix("_tokenizer").removesuffix("_statistics") in graphs}, stubs


def test_every_model_was_verified_against_its_library(stack: Stack) -> None:
    reports = json.loads((stack.repository / VERIFICATION_FILE).read_text())[MODELS_KEY]
    assert set(reports) == set(COMPARED + ["emb_int8"])
    failed = {name: r for name, r in reports.items() if r["passed"] is not True}
    assert not failed, failed
    for name, report in reports.items():
        print(f"{name}: " + ", ".join(f"{stage} {s['metric']} {s[s['metric']]:.3g}" for stage, s in report["stages"].items()))


# -- production answers as the fused one step -------------------------------------------------------


def same_json(a, b) -> float:
    """Two decoded answers (entities, an answer span) alike but for their floats: the largest float difference."""
    if isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), (a, b)
        return abs(a - b)
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (a, b)
        return max((same_json(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list):
        assert len(a) == len(b), (a, b)
        return max((same_json(x, y) for x, y in zip(a, b)), default=0.0)
    assert a == b
    return 0.0


def same_outputs(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> float:
    """Every output of two answers: integers, booleans and strings equal, floats (also inside JSON cells) within
    the returned max-abs."""
    assert got.keys() == want.keys()
    worst = 0.0
    for name in got:
        a, b = got[name], want[name]
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
        if a.dtype == object:
            for x, y in zip(a.ravel(), b.ravel()):
                worst = max(worst, same_json(json.loads(x), json.loads(y)))
        elif np.issubdtype(a.dtype, np.floating):
            worst = max(worst, float(np.abs(a - b).max()))
        else:
            np.testing.assert_array_equal(a, b, err_msg=name)
    return worst


def requests_of(task: str) -> list[dict[str, list[str]]]:
    """The task's request, and each of its rows alone."""
    whole = REQUESTS[task]
    rows = len(next(iter(whole.values())))
    return [whole] + [{name: [texts[i]] for name, texts in whole.items()} for i in range(rows)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", COMPARED)
def test_production_answers_as_the_fused_step(stack: Stack, model: str, protocol: str) -> None:
    task = stack.task(model)
    answers = {}
    for variant in VARIANTS:
        with stack.client(variant, model, protocol) as client:
            assert client.task().name == task
            answers[variant] = [client.infer(request) for request in requests_of(task)]
    worst = max(same_outputs(p, f) for p, f in zip(answers[PRODUCTION_VARIANT], answers[FUSED_VARIANT]))
    record("vs fused", f"{model} ({task})", worst)
    assert worst <= ATOL


def test_both_variants_count_what_each_model_answered(stack: Stack) -> None:
    """The output statistics of one request to every model: production counts them in its statistics step (or
    the post step, or the step that calls the graph), the fused variant in its one step; each exactly what the
    served steps answer, run in this process on the bounds generation recorded. Ten texts of one label add ten
    to that label."""
    classifier, ten = model_name("bert-seq-cls"), {"TEXT": [EMBED_TEXTS[0]] * 10}
    want = {model: statistics_support.expected(stack.repository, model, REQUESTS[stack.task(model)])
            for model in COMPARED}
    assert all(want.values()), [model for model, added in want.items() if not added]
    of_ten = statistics_support.expected(stack.repository, classifier, ten)
    [label] = [k for k in of_ten if k[0] == "tritonize_output_label_total"]
    assert of_ten[label] == 10
    want[classifier] += of_ten
    for variant in VARIANTS:
        metrics = f"http://127.0.0.1:{stack.endpoints[variant].metrics_port}/metrics"
        before = statistics_support.settled_pages(metrics, COMPARED)
        for model in COMPARED:
            with stack.client(variant, model, "grpc") as client:
                client.infer(REQUESTS[stack.task(model)])
                if model == classifier:
                    client.infer(ten)
        after = statistics_support.settled_pages(metrics, COMPARED)
        moved = {model: statistics_support.counted(before[model], after[model]) for model in COMPARED}
        # a model tokenized in graphs runs no Python step to count in: its statistics are the HTTP API's
        assert moved == {model: Counter() if model in in_graph(stack) else added for model, added in want.items()}, \
            variant


def in_graph(stack: Stack) -> set[str]:
    """The models generate served in ONNX graphs alone (its default, where the tokenizer's graph is exact)."""
    found = {m.name for m in read_manifests(stack.repository) if m.options.tokenizer == "graph"}
    assert found and found != set(COMPARED + ["emb_int8"])  # both layouts are served here
    return found


# -- production answers as the model's library ------------------------------------------------------


@pytest.fixture(scope="module")
def references():
    """Each library reference computed once, whichever protocol asks first."""
    cache: dict[str, object] = {}

    def get(key: str, compute):
        if key not in cache:
            cache[key] = compute()
        return cache[key]

    return get


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("zoo_id", EMBEDDERS)
def test_embeddings_match_sentence_transformers(stack: Stack, references, zoo_id: str, protocol: str) -> None:
    """Mean, CLS and last-token pooling, Dense layers, and each Matryoshka size as encode(truncate_dim=d) cuts it."""
    from sentence_transformers import SentenceTransformer

    folder, name = stack.folders[zoo_id], model_name(zoo_id)
    head = read_manifest(stack.repository, name).model.head
    with stack.client(PRODUCTION_VARIANT, name, protocol) as client:
        together = client.embed(EMBED_TEXTS)
        alone = np.concatenate([client.embed([t]) for t in EMBED_TEXTS])
    expected = references(zoo_id, lambda: SentenceTransformer(str(folder), device="cpu").encode(
        EMBED_TEXTS, prompt="", convert_to_numpy=True))
    worst = max(np.abs(together - expected).max(), np.abs(alone - expected).max())
    if zoo_id == "gemma3-st-embeddinggemma":
        assert head.dimensions == (32, 16, 8)
        for d in head.dimensions:
            cut = references(f"{zoo_id}/{d}", lambda d=d: SentenceTransformer(str(folder), device="cpu", truncate_dim=d)
                             .encode(EMBED_TEXTS, prompt="", normalize_embeddings=True, convert_to_numpy=True))
            assert cut.shape == (len(EMBED_TEXTS), d)
            worst = max(worst, np.abs(head.truncate(together, d) - cut).max())
    record("vs library", f"{name} (embedding, {head.pooling})", float(worst))
    assert worst <= ATOL


CLASSIFY_TEXTS = [DOCUMENTS[0], "short", "Ünïcödé café"]  # within the max length: the pipeline does not cut


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("zoo_id", ["bert-seq-cls", "bert-seq-cls-multilabel"])
def test_classifiers_match_the_pipeline(stack: Stack, references, zoo_id: str, protocol: str) -> None:
    """A softmax for one label per text, a sigmoid per label for several; Triton's classification extension ranks
    them."""
    from transformers import pipeline

    folder, name = stack.folders[zoo_id], model_name(zoo_id)
    expected = references(zoo_id, lambda: [{d["label"]: d["score"] for d in row} for row in pipeline(
        "text-classification", model=str(folder), device="cpu")(CLASSIFY_TEXTS, top_k=None)])
    id2label = json.loads((folder / "config.json").read_text())["id2label"]
    order = [id2label[str(i)] for i in range(len(id2label))]
    with stack.client(PRODUCTION_VARIANT, name, protocol) as client:
        probabilities = client.infer(CLASSIFY_TEXTS, outputs=["probabilities"])["probabilities"]
        ranked = client.classify(CLASSIFY_TEXTS, top_k=len(order))
    sums = probabilities.sum(1)
    if zoo_id.endswith("multilabel"):
        assert np.abs(sums - 1.0).max() > 0.05  # independent scores
    else:
        assert np.abs(sums - 1.0).max() <= 1e-5  # a softmax
    worst = max(np.abs(row - np.array([want[label] for label in order])).max()
                for row, want in zip(probabilities, expected))
    for top, want in zip(ranked, expected):
        assert [t.label for t in top] == sorted(want, key=want.get, reverse=True)
        worst = max(worst, max(abs(t.score - want[t.label]) for t in top))
    record("vs library", f"{name} (classification)", float(worst))
    assert worst <= ATOL


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("zoo_id", ["bert-cross-encoder", "qwen3-llm-reranker"])
def test_rerankers_match_cross_encoder_predict(stack: Stack, references, zoo_id: str, protocol: str) -> None:
    """Both variants serve the model's logits (predict with the identity as activation), and the client's sigmoid
    of them is predict's default score."""
    folder, name = stack.folders[zoo_id], model_name(zoo_id)
    pairs = [(QUERY, d) for d in DOCUMENTS]
    expected = references(zoo_id, lambda: cross_encoder_scores(folder, pairs))
    logits = references(f"{zoo_id} logits", lambda: cross_encoder_scores(folder, pairs, logits=True))
    assert np.ptp(expected) > 1e-5  # the scores tell the documents apart
    assert np.abs(logits - expected).max() > 0.1  # a sigmoid head: the logits are not the scores
    for variant in VARIANTS:
        with stack.client(variant, name, protocol) as client:
            together = client.rerank(QUERY, DOCUMENTS)
            alone = np.concatenate([client.rerank(QUERY, [d]) for d in DOCUMENTS])
            raw = client.rerank(QUERY, DOCUMENTS, raw=True)
        worst = max(np.abs(together - expected).max(), np.abs(alone - expected).max())
        record("vs library", f"{name} (rerank, {variant})", float(worst))
        record("vs library", f"{name} (rerank logits, {variant})", float(np.abs(raw - logits).max()))
        assert worst <= ATOL and np.abs(raw - logits).max() <= ATOL
        assert np.corrcoef(together, expected)[0, 1] > 0.999


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_entities_match_the_token_classification_pipeline(stack: Stack, references, protocol: str) -> None:
    zoo_id = "bert-token-cls"
    expected = references(zoo_id, lambda: pipeline_entities(stack.folders[zoo_id], "simple", NER_TEXTS))
    assert sum(len(e) for e in expected) >= 5  # entities are found: the comparison is not vacuous
    with stack.client(PRODUCTION_VARIANT, model_name(zoo_id), protocol) as client:
        together = client.entities(NER_TEXTS)
        alone = [client.entities([t])[0] for t in NER_TEXTS]
    assert_same_entities(together, expected)
    assert_same_entities(alone, expected)
    record("vs library", f"{model_name(zoo_id)} (token-classification, entity scores)",
           max(same_json(g["score"], e["score"]) for got, want in zip(together, expected) for g, e in zip(got, want)))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_answers_match_the_question_answering_pipeline(stack: Stack, references, protocol: str) -> None:
    """Several windows of a long context, each through the model step on the native backend."""
    zoo_id = "bert-qa"
    expected = references(zoo_id, lambda: [reference_answer(stack.folders[zoo_id], q, c) for q, c in QA_PAIRS])
    with stack.client(PRODUCTION_VARIANT, model_name(zoo_id), protocol) as client:
        together = client.answers([q for q, _ in QA_PAIRS], [c for _, c in QA_PAIRS])
        alone = [client.answer(q, c) for q, c in QA_PAIRS]
    assert_same_answers(together, alone, expected)
    record("vs library", f"{model_name(zoo_id)} (question-answering, span scores)",
           max(abs(g["score"] - w["score"]) for g, w in zip(together + alone, expected * 2)))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sparse_terms_match_sparse_encoder(stack: Stack, references, protocol: str) -> None:
    zoo_id = "bert-splade"
    expected = references(zoo_id, lambda: sparse_encode(stack.folders[zoo_id], SPARSE_TEXTS))
    with stack.client(PRODUCTION_VARIANT, model_name(zoo_id), protocol) as client:
        together = client.sparse(SPARSE_TEXTS)
        alone = [client.sparse([t])[0] for t in SPARSE_TEXTS]
    assert_same_terms(together, expected)
    assert_same_terms(alone, expected)
    record("vs library", f"{model_name(zoo_id)} (sparse-embedding)",
           max(float(np.abs(v.dense(len(w)) - w).max()) for v, w in zip(together + alone, list(expected) * 2)))


# -- fp16 and int8 graphs on the native backend -------------------------------------------------------


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def tensor_types(stack: Stack, name: str) -> set[str]:
    graph = onnx.load(str(stack.repository / f"{name}_model/1/model.onnx"), load_external_data=False).graph
    return {onnx.TensorProto.DataType.Name(t.data_type) for t in graph.initializer}


def embed_both(stack: Stack, name: str, protocol: str) -> tuple[np.ndarray, np.ndarray]:
    """The production server's embeddings of EMBED_TEXTS in one request and each alone."""
    with stack.client(PRODUCTION_VARIANT, name, protocol) as client:
        return client.embed(EMBED_TEXTS), np.concatenate([client.embed([t]) for t in EMBED_TEXTS])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_fp16_loads_on_the_native_backend_and_answers_as_fp32(stack: Stack, protocol: str) -> None:
    """An fp16 graph (fp32 inputs and outputs, fp16 weights and compute) on onnxruntime's CPU provider."""
    assert "FLOAT16" in tensor_types(stack, "emb_fp16")  # the graph served is the fp16 one
    fp32, _ = embed_both(stack, model_name(FP32), protocol)
    together, alone = embed_both(stack, "emb_fp16", protocol)
    low = min(cosines(together, fp32).min(), cosines(alone, fp32).min())
    print(f"\nfp16 vs fp32 on the native backend ({protocol}): min cosine {low:.9f}, "
          f"max-abs {np.abs(together - fp32).max():.3g}")
    assert low > 0.999


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_int8_loads_on_the_native_backend_and_keeps_the_fp32_direction(stack: Stack, protocol: str) -> None:
    """The int8 graph on the native backend computes what it computes in-process on the tensors the tokenizer step
    sends (padded to a bucket). The fused one step pads each group to its longest row instead; in fp32 padding
    changes nothing, but dynamic quantization scales the padded positions' activations too, so the two paths'
    int8 answers differ a little (about 1e-4), as a batch's neighbours move them: compared by cosine."""
    assert "INT8" in tensor_types(stack, "emb_int8")
    chain = in_process(stack.repository, name="emb_int8")
    runner = chain.runner

    def as_sent(text: str) -> np.ndarray:  # the graph run plain on the tokenizer step's padded tensors
        feeds = chain.encoder.encode([text])
        return runner.run({n: feeds[n] for n in runner.input_names})[runner.output_names.index("embedding")]

    sent = np.concatenate([as_sent(t) for t in EMBED_TEXTS])
    regrouped = np.concatenate([chain([(t,)]).outputs["embedding"] for t in EMBED_TEXTS])
    fp32, _ = embed_both(stack, model_name(FP32), protocol)
    together, alone = embed_both(stack, "emb_int8", protocol)
    with stack.client(FUSED_VARIANT, "emb_int8", protocol) as client:
        fused_alone = np.concatenate([client.embed([t]) for t in EMBED_TEXTS])
    # exactly what the int8 graph computes on what it is sent: the Python step's bucket-padded tensors, or, where
    # the tokenizer is in the graph, each text's own tokens (the graph cuts its rows to their longest)
    np.testing.assert_allclose(alone, regrouped if "emb_int8" in in_graph(stack) else sent, atol=1e-5)
    np.testing.assert_allclose(fused_alone, regrouped, atol=1e-5)
    assert cosines(alone, fused_alone).min() > 0.9999
    assert cosines(together, alone).min() > 0.9999  # batched beside other texts: the direction stays
    low = min(cosines(together, fp32).min(), cosines(alone, fp32).min())
    record("vs fused", "emb_int8 (embedding, texts alone; int8 moves with padding)", float(np.abs(alone - fused_alone).max()))
    print(f"int8 vs fp32 on the native backend ({protocol}): min cosine {low:.6f}; production vs fused alone: "
          f"min cosine {cosines(alone, fused_alone).min():.7f}")
    assert low >= GenerateOptions().min_cosine_int8  # what verification holds int8 to


# -- the reliability tests' bad requests through the production ensemble ------------------------------


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_a_clear_error_and_the_production_server_keeps_serving(stack: Stack, case: str) -> None:
    endpoints, name = stack.endpoints[PRODUCTION_VARIANT], model_name(FP32)
    assert_refused_and_still_serving(endpoints.http, name, case)
    with stack.client(PRODUCTION_VARIANT, name, "grpc") as client:
        assert client.embed(["still serving"]).shape == (1, 32)


# -- a killed tokenizer stub on the two-step path -----------------------------------------------------------------


@pytest.mark.parametrize("model_control", ["none", "explicit"])
def test_the_supervisor_brings_back_a_killed_tokenizer_stub(tiny_python_repo, local_options, tmp_path,
                                                             model_control: str) -> None:
    """On the two-step path the tokenizer is the Python step before the graph: kill -9 its stub under load, and
    the ensemble answers again within the reliability tests' bound, the supervisor records the recovery (a restart without
    model control, the step reloaded alone with it) and every request after it is answered, rightly."""
    name = tiny_python_repo.name
    expected = floor(tiny_python_repo.repository)
    options = local_options(tiny_python_repo.repository, tmp_path / "run", model_control=model_control)
    runtime = LocalRuntime(options, quiet=True, supervise=True, variant=PRODUCTION_VARIANT)
    endpoints = runtime.up()
    first_pid = runtime.server_pid
    try:
        stubs = instance.stub_models(first_pid)
        # The model step runs in the server itself; the statistics step after it counts what it answered.
        assert sorted(set(stubs.values())) == [f"{name}_statistics", f"{name}_tokenizer"]
        with Traffic(endpoints.grpc, name) as traffic:
            time.sleep(0.5)
            killed = time.monotonic()
            kill_dead(live_stub(runtime.directory, "tokenizer"))
            assert not runtime.status().ready  # honest at once: Triton's own ready endpoint still says 200
            took = traffic.answered_again(killed, RECOVERY_S)
            assert took is not None, (f"not answered again within {RECOVERY_S:.0f} s; supervisor log:\n"
                                      f"{supervisor_log(runtime)}")
            recorded(runtime, 1)  # the supervisor counted the recovery and watches again
            back = time.monotonic() - killed
            failed = traffic.failed(killed)
        state = instance.read_supervisor(runtime.directory)
        with TextClient(endpoints.grpc, name) as client:  # every tokenizer instance answers, rightly
            results = client.infer_many([[t] for t in VERSION_TEXTS * 8], concurrency=4)
        assert all(r.ok for r in results), [str(r.error)[:300] for r in results if not r.ok][:3]
        got = np.concatenate([r.outputs["embedding"] for r in results])
        np.testing.assert_allclose(got, np.concatenate([expected] * 8), atol=1e-5)
        status = runtime.status()
        print(f"\ntokenizer stub killed ({model_control} model control): answered again after {took:.1f}s, recovery "
              f"recorded after {back:.1f}s; {failed} requests failed; {state.restarts} restart(s), "
              f"{state.reloads} reload(s)")
        assert took < RECOVERY_S
        assert status.ready and "production configs" in status.detail
        assert "supervisor error" not in supervisor_log(runtime)
        if model_control == "explicit" and state.restarts == 0:
            assert state.reloads == 1 and instance.read_instance(runtime.directory).pid == first_pid
        else:  # a restart (with model control: only where the reload failed, and the log says so)
            assert state.restarts == 1, supervisor_log(runtime)
    finally:
        stop_and_check(runtime)
