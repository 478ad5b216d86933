"""Late-interaction (ColBERT) models served for real: TEXT and FORM in, each text's scored vectors out, equal to
MultiVectorEncoder.encode_query / encode_document, and the client's MaxSim equal to the model's similarity; a bad
FORM refused while the server keeps serving. On the fused one step and on the production configs (the Python
tokenizer step, then the graph on Triton's native onnxruntime backend).

One repository holds PyLate's layout (fixed query expansion of [MASK], [unused0]/[unused1] markers, a punctuation
skiplist), a min expansion the encoder attends to (with prompts), and a skiplist on both forms scored by MeanMaxSim.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from support import model_zoo
from support.multi_vector import TEXTS, VARIANTS, assert_same_vectors, build_variant, encode, library
from support.stopping import stop_later
from tritonize.client import ServerError, TextClient, multi_vector_inputs
from tritonize.generate import generate
from tritonize.runtime.local import LocalRuntime
from tritonize.serving.multi_vector import FORM_INPUT
from tritonize.spec import FUSED_VARIANT, PRODUCTION_VARIANT, TEXT_INPUT
from tritonize.spec.options import GenerateOptions
from tritonize.tasks.multi_vector import COUNTS, VECTORS

MODELS = ("pylate", "min-attend", "skip-both-meanmaxsim")
MAX_LENGTH = 128  # the tiny encoder's positions: what every model here serves
QUERY = "What is the capital of France?"


def name_of(model: str) -> str:
    return model.replace("-", "_")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> tuple[Path, dict[str, Path]]:
    base = tmp_path_factory.mktemp("multi-vector")
    folders = {"pylate": model_zoo.build_multi_vector(base / "pylate", "pylate")}
    folders.update({m: build_variant(base / m, **VARIANTS[m]) for m in MODELS[1:]})
    repo = base / "repo"
    for i, model in enumerate(MODELS):
        generate(GenerateOptions(model=str(folders[model]), name=name_of(model), output=str(repo), add=i > 0))
    return repo, folders


def serve(local_options, repository, tmp_path_factory, variant: str):
    repo, folders = repository
    runtime = LocalRuntime(local_options(repo, tmp_path_factory.mktemp(f"run-{variant}")), quiet=True, variant=variant)
    endpoints = runtime.up()
    return runtime, endpoints, folders


@pytest.fixture(scope="module")
def fused(local_options, repository, tmp_path_factory):
    runtime, endpoints, folders = serve(local_options, repository, tmp_path_factory, FUSED_VARIANT)
    try:
        yield endpoints, folders
    finally:
        stop_later(runtime)


@pytest.fixture(scope="module")
def production(native_backend, local_options, repository, tmp_path_factory):
    runtime, endpoints, folders = serve(local_options, repository, tmp_path_factory, PRODUCTION_VARIANT)
    try:
        yield endpoints, folders
    finally:
        stop_later(runtime)


def client(endpoints, model: str, protocol: str = "grpc") -> TextClient:
    return TextClient(endpoints.grpc if protocol == "grpc" else endpoints.http, name_of(model), protocol=protocol)


def assert_served_as_the_library(endpoints, folders, model: str, protocol: str) -> None:
    reference = library(folders[model], MAX_LENGTH)
    with client(endpoints, model, protocol) as c:
        assert c.task().name == "multi-vector"
        for form in ("query", "document"):
            assert_same_vectors(c.multi_vector(TEXTS, form), encode(reference, TEXTS, form))
            alone = [c.multi_vector([t], form)[0] for t in TEXTS[:3]]
            assert_same_vectors(alone, encode(reference, TEXTS[:3], form))
        # One request may mix the forms: each row is prepared as its own form.
        mixed = c.infer({TEXT_INPUT: [QUERY, TEXTS[2]], FORM_INPUT: ["query", "document"]})
        assert mixed[VECTORS].dtype == np.float32 and mixed[COUNTS].dtype == np.int32
        rows = [v[:n] for v, n in zip(mixed[VECTORS], mixed[COUNTS].reshape(-1))]
        assert_same_vectors(rows, [encode(reference, [QUERY], "query")[0], encode(reference, [TEXTS[2]], "document")[0]])
        assert (mixed[VECTORS][0, mixed[COUNTS][0, 0]:] == 0).all()
        import torch

        scores = c.score(QUERY, TEXTS)
        expected = reference.similarity([torch.from_numpy(encode(reference, [QUERY], "query")[0])],
                                        [torch.from_numpy(v) for v in encode(reference, TEXTS, "document")])
        assert scores.shape == (len(TEXTS),) and np.abs(scores - expected.numpy()[0]).max() <= 1e-3
        assert c.similarity() == reference.similarity_fn_name


@pytest.mark.parametrize("model", MODELS)
def test_the_fused_step_serves_each_form_as_the_library_encodes_it(fused, model: str) -> None:
    endpoints, folders = fused
    assert_served_as_the_library(endpoints, folders, model, "grpc")


def test_http_serves_the_same_vectors(fused) -> None:
    endpoints, folders = fused
    assert_served_as_the_library(endpoints, folders, "pylate", "http")


def test_the_async_client_answers_as_the_blocking_one(fused) -> None:
    """AsyncTextClient's vectors and MaxSim scores, for a meanmaxsim model, are the blocking client's."""
    import asyncio

    from tritonize.client import AsyncTextClient

    endpoints, _ = fused
    model = "skip-both-meanmaxsim"
    with client(endpoints, model) as blocking:
        vectors, scores = blocking.multi_vector(TEXTS, "query"), blocking.score(QUERY, TEXTS)

    async def main():
        async with AsyncTextClient(endpoints.grpc, name_of(model)) as c:
            return await c.multi_vector(TEXTS, "query"), await c.score(QUERY, TEXTS), await c.similarity()

    async_vectors, async_scores, similarity = asyncio.run(main())
    assert similarity == "meanmaxsim"
    assert [v.shape for v in async_vectors] == [v.shape for v in vectors]
    assert all(np.array_equal(a, b) for a, b in zip(async_vectors, vectors))
    assert np.array_equal(async_scores, scores)


@pytest.mark.parametrize("variant", ["fused", "production"])
def test_a_bad_form_is_refused_and_the_server_keeps_serving(request, variant: str) -> None:
    endpoints, folders = request.getfixturevalue(variant)
    with client(endpoints, "pylate") as c:
        with pytest.raises(ServerError, match=r"FORM\[1\] is 'passage': a row's form is 'query' or 'document'"):
            c.infer({TEXT_INPUT: ["a", "b"], FORM_INPUT: ["query", "passage"]})
        with pytest.raises(ServerError, match="FORM"):
            c.infer([QUERY])  # no FORM at all
        expected = encode(library(folders["pylate"], MAX_LENGTH), [QUERY], "document")
        assert_same_vectors(c.multi_vector([QUERY]), expected)
        assert c.infer(multi_vector_inputs([QUERY], "query"))[COUNTS].tolist() == [[32]]  # fixed expansion


@pytest.mark.parametrize("model", MODELS)
def test_the_production_configs_serve_each_form_as_the_library_encodes_it(production, model: str) -> None:
    endpoints, folders = production
    assert_served_as_the_library(endpoints, folders, model, "grpc")


def test_the_client_scripts_print_each_texts_vectors(fused) -> None:
    """curl.sh with FORM, and grpc_client.py (texts sent as documents), answer with each text's vectors."""
    import json
    import os
    import subprocess
    import sys

    from support import REPO_ROOT

    endpoints, folders = fused
    expected = encode(library(folders["pylate"], MAX_LENGTH), [QUERY, TEXTS[2]], "query")
    env = {**os.environ, "TRITON_HTTP_URL": endpoints.http, "TRITON_MODEL": name_of("pylate"), "FORM": "query"}
    result = subprocess.run(["bash", str(REPO_ROOT / "clients" / "curl.sh"), QUERY, TEXTS[2]], env=env,
                            capture_output=True, text=True, check=True)
    outputs = {o["name"]: o for o in json.loads(result.stdout)["outputs"]}
    assert outputs[COUNTS]["data"] == [len(v) for v in expected] == [32, 32]
    vectors = np.asarray(outputs[VECTORS]["data"], dtype=np.float32).reshape(outputs[VECTORS]["shape"])
    assert_same_vectors([vectors[0], vectors[1]], expected)
    script = subprocess.run([sys.executable, str(REPO_ROOT / "clients" / "grpc_client.py"), "--url", endpoints.grpc,
                             "--model", name_of("pylate"), "--json", QUERY], capture_output=True, text=True, check=True)
    row = json.loads(script.stdout)["results"][0]
    document = encode(library(folders["pylate"], MAX_LENGTH), [QUERY], "document")[0]
    assert row["text"] == QUERY and np.abs(np.asarray(row[VECTORS], dtype=np.float32) - document).max() <= 1e-4
    summary = subprocess.run([sys.executable, str(REPO_ROOT / "clients" / "grpc_client.py"), "--url", endpoints.grpc,
                              "--model", name_of("pylate"), QUERY], capture_output=True, text=True, check=True)
    assert f"{len(document)} vectors of dim {model_zoo.MULTI_VECTOR_DIM}" in summary.stdout
