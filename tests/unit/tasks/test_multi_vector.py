"""The multi-vector (ColBERT) task without a server: the head each layout declares, as MultiVectorEncoder reads it;
the served tokenizer's ids, attention and scoring masks against the library's preprocess and MultiVectorMask; the
graph verified against encode_query / encode_document and similarity; detection, --task and the refusals."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from support import model_zoo
from support.multi_vector import (
    MARKERS,
    TEXTS,
    VARIANTS,
    assert_same_vectors,
    build_variant,
    encode,
    library,
    with_markers,
)
from tritonize import source, tasks
from tritonize.errors import TritonizeError
from tritonize.folder import ModelFolder
from tritonize.generate import generate
from tritonize.serving.batching import ATTENTION_MASK, INPUT_IDS, SCORE_MASK
from tritonize.serving.multi_vector import FORM_INPUT, forms_from_json, forms_to_json
from tritonize.serving.onnx_model import OnnxRunner
from tritonize.serving.texts import InvalidText
from tritonize.serving.tokenizer import TextEncoder
from tritonize.spec import MODEL_FILE, TEXT_INPUT
from tritonize.spec.options import GenerateOptions
from tritonize.tasks.multi_vector import COUNTS, CONTRACT, VECTORS, vectors

MARKED = ("pylate-markers", "stanford-markers")  # the layouts with [unused0]/[unused1] in the vocabulary
FOLDERS = (*model_zoo.MULTI_VECTOR_LAYOUTS, *MARKED, *VARIANTS)


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """Every layout model_zoo writes, and the variants (query expansion, skiplists, prompts, meanmaxsim)."""
    base = tmp_path_factory.mktemp("multi-vector")
    built = {layout: model_zoo.build_multi_vector(base / layout, layout) for layout in model_zoo.MULTI_VECTOR_LAYOUTS}
    built.update({name: build_variant(base / name, **declared) for name, declared in VARIANTS.items()})
    built.update({name: with_markers(model_zoo.build_multi_vector(base / name, name.split("-")[0]))
                  for name in MARKED})
    return built


def spec_of(folder: Path, **options):
    return source.read_model(GenerateOptions(model=str(folder), **options))


def form(head, name: str):
    return next(f for f in head.forms if f.name == name)


@pytest.mark.parametrize("layout", model_zoo.MULTI_VECTOR_LAYOUTS)
def test_each_layout_is_detected_and_read_as_the_library_reads_it(folders, layout: str) -> None:
    folder = folders[layout]
    assert tasks.detect(ModelFolder.read(folder)).name == "multi-vector"
    spec = spec_of(folder)
    model = library(folder)
    head = spec.head
    assert head.task == "multi-vector" and head.dim == model_zoo.MULTI_VECTOR_DIM and head.similarity == "maxsim"
    assert spec.input_names == (INPUT_IDS, ATTENTION_MASK, SCORE_MASK)
    query, document = form(head, "query"), form(head, "document")
    assert (query.prompt, document.prompt) == (model.prompts["query"], model.prompts["document"])
    if layout == "sentence-transformers":  # as saved: no expansion, no mask module, the model's max length
        assert not query.expansion and query.max_length == document.max_length == model.max_seq_length
        assert not document.skip_ids and not query.skip_ids
        return
    # PyLate and Stanford ColBERT: [unused0]/[unused1] markers, fixed 32-token queries of [MASK], a punctuation
    # skiplist on documents; documents of 180 tokens, cut at the 128 positions the tiny encoder has.
    assert query.prompt.startswith("[unused0]") and document.prompt.startswith("[unused1]")
    assert (query.expansion, query.expansion_length, query.max_length) == ("fixed", 32, 32)
    assert query.expansion_id == model.tokenizer.mask_token_id and not query.attend
    assert document.max_length == spec.max_length == 128
    mask = next(m for m in model if type(m).__name__ == "MultiVectorMask")
    assert document.skip_ids == tuple(sorted(mask._skiplist_ids.tolist())) and not query.skip_ids
    assert set(document.skip_ids) >= {model.tokenizer.convert_tokens_to_ids(p) for p in "!,.?"}


@pytest.mark.parametrize("name", MARKED)
def test_a_legacy_marker_is_one_special_token_of_the_served_tokenizer(folders, name: str) -> None:
    """The library registers [unused0]/[unused1] as special tokens; the served tokenizer.json is the loaded model's,
    so a query starts [CLS] [unused0] as the library's does (AutoTokenizer's own file would split the marker)."""
    from tokenizers import Tokenizer

    spec = spec_of(folders[name])
    served = Tokenizer.from_file(spec.tokenizer_file)
    ids = [served.token_to_id(m) for m in MARKERS]
    assert None not in ids and spec.head.forms[0].prompt.startswith(MARKERS[0])
    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id, (INPUT_IDS,),
                          forms=spec.head.forms)
    rows = encoder.encode([("[unused0] is a marker", "query"), ("a document", "document")], width=0)[INPUT_IDS]
    cls = served.token_to_id("[CLS]")
    assert rows[0][:3].tolist() == [cls, ids[0], ids[0]] and rows[1][:2].tolist() == [cls, ids[1]]
    plain = Tokenizer.from_file(str(folders[name] / "tokenizer.json"))
    assert plain.encode(MARKERS[0], add_special_tokens=False).ids != [ids[0]]  # the folder's own file splits it


def test_the_forms_travel_as_json_and_through_the_manifest(folders) -> None:
    head = spec_of(folders["min-attend"]).head
    assert forms_from_json(forms_to_json(head.forms)) == head.forms
    task = tasks.of(head)
    data = json.loads(json.dumps({k: v for k, v in vars(head).items()}, default=lambda f: vars(f)))
    assert task.contract.head_from_dict(data) == head


@pytest.mark.parametrize("name", FOLDERS)
@pytest.mark.parametrize("which", ["query", "document"])
def test_the_served_tokenizer_prepares_each_form_as_the_library_does(folders, name: str, which: str) -> None:
    """Per text: the ids, the attention mask the encoder reads and the scoring mask (MultiVectorMask's rewrite of
    the attention mask; the attention mask itself without one) equal Transformer.preprocess's features."""
    folder = folders[name]
    spec = spec_of(folder)
    model = library(folder)
    mask = next((m for m in model if type(m).__name__ == "MultiVectorMask"), None)
    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id,
                          (INPUT_IDS, ATTENTION_MASK, SCORE_MASK), forms=spec.head.forms)
    prompt = model.prompts.get(which) or ""
    if which == "document" and (model[0].document_length or 0) > spec.max_length:
        model[0].document_length = spec.max_length  # PyLate's and Stanford's 180, cut at the tiny encoder's positions
    scored_somewhere = False
    for text in TEXTS:
        served = encoder.encode([(text, which)], width=0)
        features = model.preprocess([text], prompt=prompt, task=which)
        attention = features["attention_mask"].tolist()
        scored = (mask(dict(features), task=which)["attention_mask"] if mask else features["attention_mask"])
        assert served[INPUT_IDS].tolist() == features["input_ids"].tolist(), text
        assert served[ATTENTION_MASK].tolist() == attention, text
        assert served[SCORE_MASK].tolist() == scored.long().tolist(), text
        scored_somewhere |= bool((served[SCORE_MASK] != served[ATTENTION_MASK]).any())
    # Where the scoring mask differs from the attention: expansion positions scored unattended, skipped punctuation
    # (not where the expansion is attended and nothing is skipped, nor without a MultiVectorMask).
    changes = name not in ("sentence-transformers", "min-attend")
    assert scored_somewhere == changes


def test_a_row_whose_form_is_neither_is_refused_naming_it(folders) -> None:
    spec = spec_of(folders["pylate"])
    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id,
                          (INPUT_IDS, ATTENTION_MASK, SCORE_MASK), names=(TEXT_INPUT, FORM_INPUT), forms=spec.head.forms)
    inputs = {TEXT_INPUT: np.array([[b"a"], [b"b"]], dtype=object), FORM_INPUT: np.array([[b"query"], [b"passage"]], dtype=object)}
    with pytest.raises(InvalidText, match=r"FORM\[1\] is 'passage': a row's form is 'query' or 'document'") as info:
        encoder.rows(inputs, [TEXT_INPUT, FORM_INPUT])
    assert info.value.reason == "unknown_form"
    inputs[FORM_INPUT] = np.array([[b"query"], [b"document"]], dtype=object)
    assert encoder.rows(inputs, [TEXT_INPUT, FORM_INPUT]) == [("a", "query"), ("b", "document")]


@pytest.fixture(scope="module")
def generated(folders, tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("multi-vector-repos")
    return {name: generate(GenerateOptions(model=str(folders[name]), name=name.replace("-", "_"),
                                           output=str(out / name))) for name in FOLDERS}


@pytest.mark.parametrize("name", FOLDERS)
def test_generate_verifies_the_graph_against_encode_and_similarity(generated, name: str) -> None:
    report = json.loads((generated[name] / "verification.json").read_text())
    rows = len(tasks.get("multi-vector").verifier.verification_rows())
    assert report["passed"] and report["task"] == "multi-vector" and report["sentences"] == rows
    assert report["stages"]["export"]["max_abs"] <= 1e-4
    answers = report["answers"]
    assert answers["agree"] == answers["rows"] == rows and answers["pairs"] > 100
    assert answers["max_score_abs"] <= answers["score_tolerance"] == 1e-3


def test_verification_refuses_a_served_form_that_differs_from_the_library(folders, tmp_path: Path) -> None:
    """A tokenizer step that scored the skiplist's punctuation would serve more vectors than encode_document: the
    counts differ, and the report says so in one line."""
    import dataclasses

    from tritonize import export, verify

    spec = spec_of(folders["fixed-skiplist"])
    forms = tuple(dataclasses.replace(f, skip_ids=()) for f in spec.head.forms)
    wrong = dataclasses.replace(spec, head=dataclasses.replace(spec.head, forms=forms))
    graph = tasks.of(wrong.head).exporter.load(wrong)
    report = verify.verify(wrong, graph, export.export(wrong, tmp_path / "work", graph=graph).stages, set(), 1e-4, 0.999)
    assert report.passed is False and 0 < report.answers["agree"] < report.answers["rows"]
    with pytest.raises(TritonizeError, match="the served answers differ from the sentence-transformers "
                                             "MultiVectorEncoder on [0-9]+ of 35 inputs") as info:
        verify.check(report)
    assert "\n" not in str(info.value)


def test_the_graph_returns_each_rows_scored_vectors_first_and_regrouped_runs_agree(generated, folders) -> None:
    """The fixed-expansion query's expansion positions (attention 0) are scored: the runner that regroups rows by
    length keeps them, and its answers equal the padded batch's."""
    name = "fixed-skiplist"
    repo = generated[name]
    spec = spec_of(folders[name])
    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [16, 32, 64, spec.max_length], spec.pad_token_id,
                          spec.input_names, forms=spec.head.forms)
    rows = [(t, f) for t in TEXTS for f in ("query", "document")]
    feeds = encoder.encode(rows)
    onnx = repo / f"{name.replace('-', '_')}_model" / "1" / MODEL_FILE
    runner = OnnxRunner(str(onnx), 1, [16, 32, 64, spec.max_length], spec.pad_token_id, allow_spinning=False,
                        max_rows=4, shards=0, per_token=(VECTORS,))
    padded = dict(zip(runner.output_names, runner.run(feeds)))
    regrouped = dict(zip(runner.output_names, runner.run_grouped([feeds])[0]))
    assert padded[COUNTS].reshape(-1).tolist() == feeds[SCORE_MASK].sum(1).tolist()
    assert regrouped[COUNTS].tolist() == padded[COUNTS].tolist()
    assert np.abs(regrouped[VECTORS] - padded[VECTORS]).max() <= 1e-5
    for row, count in zip(padded[VECTORS], padded[COUNTS].reshape(-1)):
        assert (row[count:] == 0).all() and (np.linalg.norm(row[:count], axis=1) > 0.99).all()
    queries = [k for k, r in enumerate(rows) if r[1] == "query"]
    assert (feeds[ATTENTION_MASK][queries].sum(1) < feeds[SCORE_MASK][queries].sum(1)).any()  # expansion scored


def test_the_benchmarks_pytorch_peer_answers_as_the_library(folders) -> None:
    """What a hand-written PyTorch server computes for a batch (the benchmark's doc peer): each row's vectors."""
    folder = folders["fixed-skiplist"]
    spec = spec_of(folder)
    task = tasks.of(spec.head)
    rows = [(t, "query") for t in TEXTS[:3]] + [(t, "document") for t in TEXTS]
    answers, real, padded = task.peer.doc_answers(spec, task.exporter.load(spec, eager=False), None, rows)
    model = library(folder)
    expected = [*encode(model, TEXTS[:3], "query"), *encode(model, TEXTS, "document")]
    assert_same_vectors([np.asarray(a[VECTORS], dtype=np.float32).reshape(-1, spec.head.dim) for a in answers], expected)
    assert 0 < real < padded


def test_answers_read_real_vectors_and_score_as_the_library(folders) -> None:
    """`vectors` drops the zero rows; the head's maxsim equals the model's similarity (MaxSim, and MeanMaxSim)."""
    import torch

    rng = np.random.default_rng(0)
    outputs = {VECTORS: rng.standard_normal((3, 5, 4)).astype(np.float32), COUNTS: np.array([[5], [2], [0]], np.int32)}
    got = vectors(outputs)
    assert [v.shape for v in got] == [(5, 4), (2, 4), (0, 4)] and np.array_equal(got[1], outputs[VECTORS][1, :2])
    assert "5 vectors of dim 4" in CONTRACT.summary_line(CONTRACT.rows(outputs)[0])
    assert CONTRACT.row_for("x") == ("x", "document")
    for name in ("fixed-skiplist", "skip-both-meanmaxsim"):
        model, head = library(folders[name]), spec_of(folders[name]).head
        assert head.similarity == model.similarity_fn_name
        query = model.encode_query(TEXTS[0], convert_to_numpy=True)
        documents = model.encode_document(TEXTS, convert_to_numpy=True)
        expected = model.similarity([torch.from_numpy(query)], [torch.from_numpy(d) for d in documents]).numpy()[0]
        assert np.abs(head.maxsim(query, documents) - expected).max() <= 1e-4


@pytest.mark.parametrize("layout", model_zoo.MULTI_VECTOR_LAYOUTS)
def test_task_embedding_on_a_late_interaction_folder_is_refused(folders, layout: str) -> None:
    """sentence-transformers would load it as a mean-pooled SentenceTransformer: another model, one vector per text."""
    with pytest.raises(TritonizeError, match="--task embedding contradicts the folder: a late-interaction model") as info:
        spec_of(folders[layout], task="embedding")
    assert "\n" not in str(info.value) and "its head is multi-vector" in str(info.value)


def test_task_multi_vector_on_another_folder_is_refused(tmp_path: Path) -> None:
    folder = model_zoo.build("bert-splade", tmp_path / "zoo")
    with pytest.raises(TritonizeError, match="--task multi-vector contradicts the folder") as info:
        spec_of(folder, task="multi-vector")
    assert "\n" not in str(info.value)
    assert spec_of(model_zoo.build_multi_vector(tmp_path / "st", "pylate"), task="multi-vector").head.task == "multi-vector"


def _with_modules(folder: Path, base: Path, extra) -> Path:
    from sentence_transformers import MultiVectorEncoder

    modules = list(library(model_zoo.build_multi_vector(base, "sentence-transformers"))) + [extra]
    MultiVectorEncoder(modules=modules, device="cpu").save(str(folder))
    return folder


def test_token_pooling_and_other_modules_are_refused_in_one_line(tmp_path: Path) -> None:
    from sentence_transformers.multi_vector_encoder.modules import HierarchicalTokenPooling
    from sentence_transformers.sentence_transformer.modules import Dropout

    pooled = _with_modules(tmp_path / "pooled", tmp_path / "b1", HierarchicalTokenPooling(pool_factor=2))
    with pytest.raises(TritonizeError, match=r"pools its token vectors \(Transformer -> Dense -> Normalize -> "
                                             r"HierarchicalTokenPooling\)") as info:
        generate(GenerateOptions(model=str(pooled), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value) and not (tmp_path / "repo").exists()
    other = _with_modules(tmp_path / "other", tmp_path / "b2", Dropout(0.1))
    with pytest.raises(TritonizeError, match="unsupported MultiVectorEncoder modules .*Dropout") as info:
        generate(GenerateOptions(model=str(other), output=str(tmp_path / "repo")))
    assert "\n" not in str(info.value)


def test_a_max_length_below_the_query_expansion_is_refused(folders) -> None:
    with pytest.raises(TritonizeError, match="expands queries to 32 tokens, more than the max length 20"):
        spec_of(folders["pylate"], max_length=20)
    head = spec_of(folders["pylate"], max_length=64).head  # documents cut shorter, queries as declared
    assert (form(head, "query").max_length, form(head, "document").max_length) == (32, 64)
