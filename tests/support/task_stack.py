"""One repository of every task the API routes serve (an embedder, a reranker, a classifier, a token classifier,
extractive QA, SPLADE and a late-interaction ColBERT), one local Triton, one API: a session fixture the route
tests share, so the server starts once."""

from __future__ import annotations

import pytest

from support import model_zoo
from support.api import api_over_triton

QUERY = "what does the server do with raw strings?"
DOCUMENTS = ["Triton serves raw strings with dynamic batching.", "A fox jumps over the lazy dog.",
             "Ünïcödé café, naïve", "The server answers every request it accepts."]
MAX_TEXTS = 16  # per request: the most any test here sends, and the most the schema fuzzer's lists hold
MODELS = {  # name -> zoo entry (the embedder is tests/support/tiny_models' sentence-transformers folder)
    "ranker": "bert-cross-encoder", "sentiment": "bert-seq-cls", "ner": "bert-token-cls", "reader": "bert-qa",
    "splade": "bert-splade",
}
LATE_INTERACTION = "colbert"


@pytest.fixture(scope="session")
def task_stack(local_triton, local_options, tmp_path_factory):
    from support.tiny_models import build_embedding_model
    from tritonize.generate import generate
    from tritonize.spec.options import GenerateOptions

    base = tmp_path_factory.mktemp("api-tasks")
    repo = base / "repo"
    folders = {"emb": build_embedding_model(base / "emb")}
    generate(GenerateOptions(model=str(folders["emb"]), name="emb", output=str(repo)))
    for name, zoo_id in MODELS.items():
        folders[name] = model_zoo.build(zoo_id, base / "zoo")
    # A late-interaction model in PyLate's layout (query expansion, a punctuation skiplist), beside the cross-encoder.
    folders[LATE_INTERACTION] = model_zoo.build_multi_vector(base / LATE_INTERACTION, "pylate")
    for name in (*MODELS, LATE_INTERACTION):
        generate(GenerateOptions(model=str(folders[name]), name=name, output=str(repo), add=True))
    options = local_options(repo, base / "run")
    with api_over_triton(options, "--max-client-batch-size", str(MAX_TEXTS)) as (endpoints, api):
        yield folders, endpoints, api


