"""Every family and layout a user brings (tests/support/model_zoo.py), through the whole generator.

Each folder is built the way current libraries save it, then generated: its task must be the folder's own
head, and verification must pass against the model's own library (sentence-transformers' encode,
CrossEncoder.predict, the model's transformers class, the token-classification pipeline, the
question-answering pipeline's steps). A head tritonize cannot serve exactly is refused with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from support import model_zoo
from tritonize.errors import TritonizeError
from tritonize.generate import generate
from tritonize.repository import parse_config
from tritonize.spec.options import GenerateOptions

# The zoo's task names -> what tritonize serves them as.
SERVED_AS = {"embedding": "embedding", "sparse-embedding": "sparse-embedding", "classification": "classification",
             "reranker": "rerank", "token-classification": "token-classification",
             "question-answering": "question-answering"}
REFERENCE = {"embedding": "sentence-transformers", "sparse-embedding": "sentence-transformers SparseEncoder",
             "classification": "transformers pipeline", "rerank": "sentence-transformers CrossEncoder",
             "token-classification": "transformers", "question-answering": "transformers"}
# Where a served step follows (or drives) the graph, or renders its input: the whole answer (or the tokens) against
# the model's library, by task or by zoo layout.
ANSWERS = {"token-classification": {"reference": "transformers pipeline", "rows": 16, "agree": 16, "passed": True},
           "question-answering": {"reference": "question-answering pipeline steps", "rows": 6, "agree": 6, "passed": True},
           "sparse-embedding": {"reference": "sentence-transformers SparseEncoder", "rows": 16, "agree": 16, "passed": True},
           "st-llm-reranker": {"reference": "sentence-transformers CrossEncoder preprocess (token ids)", "rows": 8,
                               "agree": 8, "passed": True}}
ANSWER_KEYS = ("reference", "rows", "agree", "passed")


# The tokenizer families the graph layout serves exactly (tests/unit/test_graph_tokenizer.py: the others are refused
# by their kind, Unigram, or by the gate).
GRAPH_FAMILIES = ("bert", "distilbert", "electra", "roberta", "modernbert", "qwen2", "qwen3", "gemma2", "gemma3")


@pytest.fixture(scope="module")
def zoo_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("zoo")


@pytest.mark.parametrize("entry", model_zoo.ZOO, ids=[e.id for e in model_zoo.ZOO])
def test_every_folder_is_served_exactly(entry, zoo_root: Path, tmp_path: Path) -> None:
    folder = model_zoo.build(entry, zoo_root)
    task = SERVED_AS[entry.task]
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["task"] == task
    assert report["reference"] == REFERENCE[task]
    assert report["passed"] is True and report["stages"]["export"]["max_abs"] <= 1e-4
    answers = report.get("answers")
    assert (answers and {k: answers[k] for k in ANSWER_KEYS}) == ANSWERS.get(entry.layout, ANSWERS.get(task))
    if task == "sparse-embedding":  # the same non-zero terms as encode, none of them only by float noise at zero
        assert answers["max_abs"] <= 1e-4 and answers["borderline"] == 0 and answers["terms"]["min"] >= 1
    if task == "rerank":
        assert_logits_served(repo, report)
    # The container's model step: Triton's own onnxruntime backend. Where the tokenizer runs in graphs (the
    # default, where exact: one text a row, WordPiece or byte-level BPE) it takes the texts and no Python step is
    # written; elsewhere its outputs are the first of the local config's (which, as one step, also passes on the
    # tokenizer's).
    model_dir = repo / "zoo_model"
    container = parse_config((model_dir / "config.pbtxt").read_text())
    assert container.platform == "onnxruntime_onnx"
    graphs = yaml.safe_load((repo / "tritonize.yaml").read_text())["tokenizer"] == "graph"
    assert graphs == (task in ("embedding", "classification") and entry.layout != "st-prompts"
                      and entry.family in GRAPH_FAMILIES), entry.id
    if graphs:
        assert [i.name for i in container.input] == ["TEXT"] and not list(repo.rglob("*.py"))
        return
    local = parse_config((model_dir / "configs" / "fused.pbtxt").read_text())
    assert local.backend == "python"
    graph = [(o.name, list(o.dims)) for o in container.output]
    assert [(o.name, list(o.dims)) for o in local.output][: len(graph)] == graph


def test_a_multi_label_head_is_served_with_a_sigmoid_per_label(zoo_root: Path, tmp_path: Path) -> None:
    """The pipeline, the model's own class and the repository's graph agree: sigmoid(logits), not a softmax."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from tritonize.chain import in_process

    folder = model_zoo.build("bert-seq-cls-multilabel", zoo_root)
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["output"] == "probabilities" and report["reference"] == "transformers pipeline"
    texts = ["a short text", "Ünïcödé café, naïve", "The quick brown fox jumps over the lazy dog."]
    served = np.concatenate([in_process(repo)([(t,)]).outputs["probabilities"] for t in texts])
    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModelForSequenceClassification.from_pretrained(folder)
    with torch.no_grad():
        sigmoid = torch.sigmoid(model(**tokenizer(texts, padding=True, return_tensors="pt")).logits).numpy()
    by_label = [{d["label"]: d["score"] for d in row} for row in pipeline("text-classification", model=str(folder))(
        texts, top_k=None)]
    piped = np.array([[row[model.config.id2label[i]] for i in range(model.config.num_labels)] for row in by_label])
    assert np.abs(served - sigmoid).max() <= 1e-5 and np.abs(served - piped).max() <= 1e-5
    assert np.abs(served.sum(1) - 1).max() > 0.05


@pytest.mark.parametrize("problem_type", ["regression", "multi_class_ranking"])
def test_a_problem_type_not_served_is_refused_in_one_line(problem_type: str, zoo_root: Path, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "cls"
    shutil.copytree(model_zoo.build("bert-seq-cls", zoo_root), folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "problem_type": problem_type}))
    with pytest.raises(TritonizeError) as info:
        generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    message = str(info.value)
    assert f"problem_type {problem_type!r}" in message and "multi_label_classification (sigmoid)" in message
    assert "\n" not in message and not (tmp_path / "repo").exists()


def assert_logits_served(repo: Path, report: dict) -> None:
    """A reranker's graph returns the head's logit with no activation inside; verification held it to
    CrossEncoder.predict(activation_fn=Identity()) and, where the folder declares a sigmoid, held the head's
    activation of it to predict's default scores; the ensemble names the activation for clients."""
    import onnx

    from tritonize.manifest import read_manifest

    head = read_manifest(repo).model.head
    graph = onnx.load(str(repo / "zoo_model" / "1" / "model.onnx"))
    assert [o.name for o in graph.graph.output] == ["logit"] and report["output"] == "logit"
    last = next(n for n in graph.graph.node if "logit" in n.output)  # the graph used to end in the Sigmoid
    assert last.op_type not in ("Sigmoid", "Softmax", "Tanh", "Relu"), last.op_type
    ensemble = parse_config((repo / "zoo" / "config.pbtxt").read_text())
    assert ensemble.parameters["activation"].string_value == head.activation
    forms = report.get("derived", {})
    if head.activation == "identity":
        assert forms == {}
    else:
        assert list(forms) == [f"{head.activation} score"] and forms[f"{head.activation} score"]["passed"]
        assert forms[f"{head.activation} score"]["max_abs"] <= 1e-4


@pytest.mark.parametrize("layout", ["sbert_ce_default_activation_function", "sentence_transformers"])
def test_older_cross_encoder_layouts_keep_their_activation(layout: str, zoo_root: Path, tmp_path: Path) -> None:
    """sentence-transformers < 4 and 4.x kept the activation in config.json; CrossEncoder.predict reads it there."""
    import shutil

    folder = tmp_path / "old-ce"
    shutil.copytree(model_zoo.build("bert-hub-reranker", zoo_root), folder)
    config = json.loads((folder / "config.json").read_text())
    identity = "torch.nn.modules.linear.Identity"
    config.update({layout: identity} if layout.startswith("sbert") else {layout: {"activation_fn": identity}})
    (folder / "config.json").write_text(json.dumps(config))
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["passed"] and report["reference"] == "sentence-transformers CrossEncoder"
    assert "identity score" in (repo / "README.md").read_text()


def test_a_head_tritonize_cannot_serve_is_refused_with_one_line(tmp_path: Path) -> None:
    """A masked-LM head is neither embedding nor classification: refused, never served as something else."""
    from transformers import BertForMaskedLM

    from support.tiny_models import _config, build_tokenizer

    folder = tmp_path / "mlm"
    config = _config()
    config.architectures = ["BertForMaskedLM"]
    BertForMaskedLM(config).save_pretrained(folder)
    build_tokenizer(folder, 64)
    with pytest.raises(TritonizeError, match="cannot serve a BertForMaskedLM exactly") as info:
        generate(GenerateOptions(model=str(folder), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value) and "question-answering" in info.value.hint


# -- decoders, T5 and Gemma embedders: what the folder declares is what is served -------------------------

TEXTS = ["hello world", "Ünïcödé café, naïve", " ".join(["The quick brown fox jumps over the lazy dog."] * 6)]


def served_embeddings(repo: Path, texts: list[str]) -> np.ndarray:
    """The repository's own steps (tokenizer step, ONNX graph) in this process, one text at a time."""
    from tritonize.chain import in_process

    chain = in_process(repo)
    return np.concatenate([chain([(t,)]).outputs["embedding"] for t in texts])


@pytest.mark.parametrize("change", [{"use_bidirectional_attention": False}, {"sliding_window": 128}],
                         ids=["causal", "no-window"])
def test_gemma3_attention_is_served_as_the_folder_declares_it(change: dict, zoo_root: Path, tmp_path: Path) -> None:
    """EmbeddingGemma's bidirectional, sliding-window attention is in the graph: the same weights declared causal,
    or without a window, verify against their own encode too, and answer otherwise on a text longer than the window."""
    import shutil

    folder = model_zoo.build("gemma3-st-embeddinggemma", zoo_root)
    variant = shutil.copytree(folder, tmp_path / "variant")
    config = json.loads((variant / "config.json").read_text())
    (variant / "config.json").write_text(json.dumps({**config, **change}))
    repos = [generate(GenerateOptions(model=str(f), name="zoo", output=str(tmp_path / f"repo{i}")))
             for i, f in enumerate((folder, variant))]
    for repo in repos:
        assert json.loads((repo / "verification.json").read_text())["stages"]["export"]["max_abs"] <= 1e-4
    declared, changed = (served_embeddings(repo, TEXTS) for repo in repos)
    assert np.abs(declared[-1] - changed[-1]).max() > 1e-3  # the long text: the attention pattern matters


def test_matryoshka_sizes_are_recorded_verified_and_cut_like_sentence_transformers(zoo_root: Path, tmp_path: Path) -> None:
    from sentence_transformers import SentenceTransformer

    from tritonize.manifest import read_manifest

    folder = model_zoo.build("gemma3-st-embeddinggemma", zoo_root)
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"), matryoshka_dims=[8, 16]))
    report = json.loads((repo / "verification.json").read_text())
    assert sorted(report["derived"]) == ["dim 16", "dim 32", "dim 8"]
    assert all(v["passed"] and v["max_abs"] <= 1e-4 for v in report["derived"].values())
    manifest = read_manifest(repo)
    head = manifest.model.head
    assert head.dimensions == (32, 16, 8) and manifest.options.matryoshka_dims == [8, 16]
    served = served_embeddings(repo, TEXTS)
    for d in (16, 8):
        expected = SentenceTransformer(str(folder), device="cpu", truncate_dim=d).encode(
            TEXTS, prompt="", normalize_embeddings=True)
        cut = head.truncate(served, d)
        assert cut.shape == (len(TEXTS), d) and np.abs(cut - expected).max() <= 1e-4
        assert np.allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-5)  # re-normalised, as the model normalises
    with pytest.raises(TritonizeError, match="cannot be cut to 12 values") as info:
        head.truncate(served, 12)
    assert "\n" not in str(info.value)


def test_a_model_that_declares_no_sizes_refuses_every_cut(zoo_root: Path) -> None:
    from tritonize.source import read_model

    head = read_model(GenerateOptions(model=str(model_zoo.build("gemma3-st-embeddinggemma", zoo_root)))).head
    assert head.dimensions == ()
    with pytest.raises(TritonizeError, match=r"Matryoshka sizes declared: none"):
        head.truncate(np.ones((1, 32), dtype=np.float32), 16)


def test_the_model_card_declares_matryoshka_sizes(zoo_root: Path, tmp_path: Path) -> None:
    """sentence-transformers writes a MatryoshkaLoss's parameters into the model card it saves after training."""
    import shutil

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.losses import MatryoshkaLoss, MultipleNegativesRankingLoss

    folder = shutil.copytree(model_zoo.build("gemma3-st-embeddinggemma", zoo_root), tmp_path / "trained")
    model = SentenceTransformer(str(folder), device="cpu")
    config = MatryoshkaLoss(model, MultipleNegativesRankingLoss(model), [32, 24, 8]).get_config_dict()
    with (folder / "README.md").open("a", encoding="utf-8") as card:  # as the card template renders a loss
        card.write("\n* Loss: MatryoshkaLoss with these parameters:\n  ```json\n  "
                   + json.dumps(config, indent=4).replace("\n", "\n  ") + "\n  ```\n")
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert sorted(report["derived"]) == ["dim 24", "dim 32", "dim 8"] and report["passed"]


def test_a_folder_saved_with_truncate_dim_is_served_as_its_encode_returns(zoo_root: Path, tmp_path: Path) -> None:
    """encode cuts to truncate_dim after Normalize, without re-normalising: so does the graph."""
    from sentence_transformers import SentenceTransformer

    from tritonize.manifest import read_manifest

    folder = model_zoo.build("gemma3-st-truncate-dim", zoo_root)
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo"), matryoshka_dims=[8]))
    head = read_manifest(repo).model.head
    assert (head.dim, head.truncate_dim, head.dimensions) == (16, 16, (16, 8))
    served = served_embeddings(repo, TEXTS)
    expected = SentenceTransformer(str(folder), device="cpu").encode(TEXTS, prompt="")
    assert served.shape == expected.shape == (len(TEXTS), 16) and np.abs(served - expected).max() <= 1e-4
    assert (np.linalg.norm(served, axis=1) < 0.999).all()  # the first 16 of a unit vector
    with pytest.raises(TritonizeError, match="--matryoshka-dims 32: this model serves 16-value embeddings") as info:
        generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "other"), matryoshka_dims=[32]))
    assert "truncate_dim 16" in str(info.value) and not (tmp_path / "other").exists()


def test_matryoshka_sizes_need_an_embedder_verified_by_sentence_transformers(zoo_root: Path, tmp_path: Path) -> None:
    with pytest.raises(TritonizeError, match="--matryoshka-dims does not apply to a classifier"):
        generate(GenerateOptions(model=str(model_zoo.build("llama-seq-cls", zoo_root)), output=str(tmp_path / "a"),
                                 matryoshka_dims=[16]))
    with pytest.raises(TritonizeError, match="--matryoshka-dims needs the folder's own sentence-transformers modules"):
        generate(GenerateOptions(model=str(model_zoo.build("gemma3-st-embeddinggemma", zoo_root)), pooling="cls",
                                 output=str(tmp_path / "b"), matryoshka_dims=[16]))


def test_t5_is_served_as_its_encoder_alone(tmp_path: Path) -> None:
    """A bare T5EncoderModel is an embedder with --task embedding; T5's encoder-decoder heads are refused in one line."""
    folder = model_zoo.build_hf_model(tmp_path / "t5-encoder", "t5")
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["T5EncoderModel"]
    repo = generate(GenerateOptions(model=str(folder), task="embedding", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["reference"] == "transformers" and report["passed"]
    classifier = model_zoo.build_sequence_classifier(tmp_path / "t5-cls", "t5")
    with pytest.raises(TritonizeError, match="'T5ForSequenceClassification' .*served as its encoder alone") as info:
        generate(GenerateOptions(model=str(classifier), output=str(tmp_path / "refused")))
    assert "\n" not in str(info.value) and not (tmp_path / "refused").exists()


@pytest.mark.parametrize("zoo_id", ["mistral-st-lasttoken", "gemma3-st-embeddinggemma", "t5-st-mean-dense"])
def test_large_graphs_keep_their_weights_as_external_data(zoo_id: str, zoo_root: Path, tmp_path: Path) -> None:
    """Past protobuf's 2 GB, weights go to model.onnx.data; the new families export and verify that way too."""
    from tritonize import export, verify
    from tritonize.source import read_model

    spec = read_model(GenerateOptions(model=str(model_zoo.build(zoo_id, zoo_root))))
    graph = export.load_torch_model(spec)
    artifacts = export.export(spec, tmp_path, graph=graph, external_threshold=0)
    files = artifacts.files_for(artifacts.onnx)
    assert [f.name for f in files] == ["model.onnx", "model.onnx.data"] and files[1].stat().st_size > files[0].stat().st_size
    report = verify.verify(spec, graph, artifacts.stages, set(), atol=1e-4, min_cosine=0.999)
    assert report.passed and report.stages["export"].max_abs <= 1e-4


# -- SPLADE and causal-LM rerankers: what the served steps add is held to the library too ------------------------

def test_sparse_terms_are_cut_where_the_folder_declares_max_active_dims(zoo_root: Path) -> None:
    """The served step keeps the `max_active_dims` largest terms, as SparseEncoder.encode does; the same step
    without the folder's limit answers otherwise, and verification says so."""
    import dataclasses

    from tritonize import tasks
    from tritonize.source import read_model

    spec = read_model(GenerateOptions(model=str(model_zoo.build("distilbert-splade-log1p", zoo_root))))
    task = tasks.of(spec.head)
    assert spec.head.max_active_dims == 12 and spec.head.activation == "log1p_relu"
    rows = task.verifier.verification_rows()
    _, weights = task.verifier.reference(spec, None, rows)  # every term, as the graph returns them
    assert (weights > 0).sum(1).max() > 12  # the limit cuts some texts
    declared = task.verifier.served_check(spec, None, rows, [weights])
    assert declared["passed"] and declared["terms"]["max"] == 12
    unlimited = dataclasses.replace(spec, head=dataclasses.replace(spec.head, max_active_dims=0))
    ignored = task.verifier.served_check(unlimited, None, rows, [weights])
    assert not ignored["passed"] and ignored["agree"] == int(((weights > 0).sum(1) <= 12).sum())


def test_an_llm_rerankers_tokens_are_checked_against_its_library(zoo_root: Path) -> None:
    """The rendered, tokenized and truncated pairs equal CrossEncoder's own preprocess, id for id; without the
    template's closing tokens restored, exactly the pairs cut at the max length differ."""
    import dataclasses

    from tritonize import tasks
    from tritonize.source import read_model
    from tritonize.verify import tokenize

    spec = read_model(GenerateOptions(model=str(model_zoo.build("qwen3-llm-reranker", zoo_root))))
    task, rows = tasks.of(spec.head), tasks.of(spec.head).verifier.verification_rows()
    assert task.verifier.served_check(spec, None, rows, [])["agree"] == len(rows)
    cut = int((tokenize(spec, rows)["attention_mask"].sum(1) == spec.max_length).sum())
    assert cut >= 2  # long documents are among the verification pairs
    unrestored = dataclasses.replace(spec, head=dataclasses.replace(spec.head, suffix_ids=()))
    assert task.verifier.served_check(unrestored, None, rows, [])["agree"] == len(rows) - cut


def test_an_llm_reranker_graph_has_no_cache_and_two_rows_of_its_lm_head(tmp_path: Path) -> None:
    """The causal graph takes the tokens and returns the score alone (no past key values), and keeps only the
    declared tokens' rows of an untied LM head: one vocabulary-sized matrix (the embeddings), not two."""
    import onnx

    folder = model_zoo.build_llm_reranker(tmp_path / "untied", tied=False)
    repo = generate(GenerateOptions(model=str(folder), name="zoo", output=str(tmp_path / "repo")))
    assert json.loads((repo / "verification.json").read_text())["passed"]
    graph = onnx.load(str(repo / "zoo_model" / "1" / "model.onnx"))
    assert [i.name for i in graph.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in graph.graph.output] == ["logit"]
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    assert sum(1 for t in graph.graph.initializer if vocab in t.dims) == 1


def test_an_llm_reranker_template_that_rewrites_the_texts_is_refused(zoo_root: Path, tmp_path: Path) -> None:
    import shutil

    folder = shutil.copytree(model_zoo.build("qwen3-llm-reranker", zoo_root), tmp_path / "trimmed")
    template = folder / "chat_template.jinja"
    template.write_text(template.read_text().replace("| first }}<|im_end|>", "| first | trim }}<|im_end|>"))
    with pytest.raises(TritonizeError, match="does not place the query and the document verbatim") as info:
        generate(GenerateOptions(model=str(folder), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value) and not (tmp_path / "repo").exists()


@pytest.mark.parametrize("case", ["inference-free splade", "no LogitScore", "bare causal LM"])
def test_sparse_and_causal_heads_tritonize_cannot_serve_are_refused_in_one_line(case: str, zoo_root: Path,
                                                                                tmp_path: Path) -> None:
    import shutil

    if case == "inference-free splade":  # SparseEncoder's Router: a static query encoder beside SPLADE for documents
        from sentence_transformers import SparseEncoder
        from sentence_transformers.base.modules import Router, Transformer
        from sentence_transformers.sparse_encoder.modules import SparseStaticEmbedding, SpladePooling

        document = Transformer(str(model_zoo.build("bert-splade", zoo_root)), transformer_task="fill-mask")
        router = Router.for_query_document(query_modules=[SparseStaticEmbedding(tokenizer=document.tokenizer)],
                                           document_modules=[document, SpladePooling("max")])
        folder = tmp_path / "inference-free"
        SparseEncoder(modules=[router], device="cpu").save(str(folder))
        expected = "modules Router and no Transformer module"
    elif case == "no LogitScore":
        folder = shutil.copytree(model_zoo.build("qwen3-llm-reranker", zoo_root), tmp_path / "no-score")
        modules = json.loads((folder / "modules.json").read_text())
        (folder / "modules.json").write_text(json.dumps(modules[:1]))
        expected = "unsupported CrossEncoder modules Transformer in"
    else:  # the causal LM alone, without sentence-transformers' modules: nothing says how it scores
        folder = shutil.copytree(model_zoo.build("qwen3-llm-reranker", zoo_root), tmp_path / "bare")
        for name in ("modules.json", "config_sentence_transformers.json", "sentence_bert_config.json"):
            (folder / name).unlink()
        expected = "cannot serve a Qwen3ForCausalLM exactly"
    with pytest.raises(TritonizeError, match=expected) as info:
        generate(GenerateOptions(model=str(folder), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value) and not (tmp_path / "repo").exists()


@pytest.mark.parametrize("layout", model_zoo.MULTI_VECTOR_LAYOUTS)
def test_a_late_interaction_folder_is_served_as_one_and_never_as_an_embedder(layout: str, tmp_path: Path) -> None:
    """A ColBERT folder in each layout the installed MultiVectorEncoder reads is served as the multi-vector task
    (one vector per scored token, verified against its encode_document), not refused. --task embedding is still
    refused in one line: sentence-transformers would load it as a mean-pooled SentenceTransformer, and a repository
    verified against that conversion would serve one vector per text, silently wrong."""
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer

    folder = model_zoo.build_multi_vector(tmp_path / layout, layout)
    own = MultiVectorEncoder(str(folder), device="cpu").encode_document(["one vector per token"])[0]
    assert own.ndim == 2 and own.shape[1] == model_zoo.MULTI_VECTOR_DIM
    assert SentenceTransformer(str(folder), device="cpu").encode(["one vector per token"]).shape == (1, 32)
    with pytest.raises(TritonizeError, match="contradicts the folder: a late-interaction model") as info:
        generate(GenerateOptions(model=str(folder), task="embedding", output=str(tmp_path / "refused")))
    assert "\n" not in str(info.value) and not (tmp_path / "refused").exists()
    repo = generate(GenerateOptions(model=str(folder), name="colbert", output=str(tmp_path / "repo")))
    report = json.loads((repo / "verification.json").read_text())
    assert report["task"] == "multi-vector" and report["passed"] and report["answers"]["agree"] == report["sentences"]
    config = parse_config((repo / "colbert" / "config.pbtxt").read_text())
    assert [o.name for o in config.output][:2] == ["token_vectors", "vector_counts"]
    assert list(config.output[0].dims) == [-1, model_zoo.MULTI_VECTOR_DIM]


def test_a_library_never_converts_a_folder_into_the_model_it_is_verified_against(tmp_path: Path) -> None:
    """Verification and export load a folder only in the sentence-transformers class it was saved as: a SPLADE
    folder that declares itself a SentenceTransformer would become a SparseEncoder with a new autoencoder on top."""
    import shutil

    folder = shutil.copytree(model_zoo.build("bert-splade", tmp_path / "zoo"), tmp_path / "retyped")
    st_config = folder / "config_sentence_transformers.json"
    st_config.write_text(json.dumps({**json.loads(st_config.read_text()), "model_type": "SentenceTransformer"}))
    with pytest.raises(TritonizeError, match="saved as a sentence-transformers SentenceTransformer, and SparseEncoder "
                                             "would convert it") as info:
        generate(GenerateOptions(model=str(folder), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value) and not (tmp_path / "repo").exists()
