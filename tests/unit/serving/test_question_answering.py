"""The served question-answering code gives the question-answering pipeline's answers.

Tiny random QA models (BERT + WordPiece, RoBERTa + a byte-level BPE trained
here) are built once per module. The expected answers come from transformers'
`pipeline("question-answering")` where it exists (transformers 4.x). It was
removed in transformers 5, so there `reference_answers` stands in for it: the
4.x pipeline's preprocess/_forward/postprocess, step for step, on transformers'
own tokenizer call and `select_starts_ends`, run window by window, unpadded,
as the pipeline runs them. `test_reference_is_the_pipeline` pins the stand-in
to the real pipeline whenever both are importable.

The served side loads the module from a copy of its file (tritonize is not
installed in a Triton repository), tokenizes with tokenizer.json only, pads
the windows into one batch as a server would, and decodes the logits.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from support import REPO_ROOT
from support.question_answering import (
    MAX_LENGTH,
    PAIRS,
    QAModel,
    build_bert,
    build_roberta,
    long_context,
    pipeline_encoding,
    reference_answers,
    torch,
)

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> QAModel:
    return QAModel(build_bert(tmp_path_factory.mktemp("bert-qa")))


@pytest.fixture(scope="module")
def roberta(tmp_path_factory) -> QAModel:
    return QAModel(build_roberta(tmp_path_factory.mktemp("roberta-qa")))


@pytest.fixture(params=["bert", "roberta"])
def qa(request) -> QAModel:
    return request.getfixturevalue(request.param)


# --- the expected side: the pipeline ----------------------------------------------


MODULE_FILE = REPO_ROOT / "tritonize" / "tasks" / "question_answering" / "served" / "question_answering.py"
STRIDE = 16
HAS_PIPELINE = importlib.util.find_spec("transformers.pipelines.question_answering") is not None


@pytest.fixture(scope="module")
def qa_module(tmp_path_factory) -> ModuleType:
    """The module as a Triton repository gets it: model.py in a version folder with the served modules it
    imports beside it, imported as Triton's stub imports it (the folder as a package)."""
    from tritonize import serving

    root = tmp_path_factory.mktemp("served")
    version = root / "served_qa_1"
    version.mkdir()
    for name, source in serving.step_files("question_answering", "model.py").items():
        shutil.copy(source, version / name)
    assert (version / "model.py").read_bytes() == MODULE_FILE.read_bytes()
    sys.path.insert(0, str(root))
    try:
        return importlib.import_module("served_qa_1.model")
    finally:
        sys.path.remove(str(root))


@pytest.fixture(scope="module")
def bert_context_first(bert: QAModel, tmp_path_factory) -> QAModel:
    """The BERT folder with a left-padding tokenizer: the pipeline then puts the context first."""
    folder = tmp_path_factory.mktemp("bert-qa-left")
    for item in bert.folder.iterdir():
        if item.is_file():
            shutil.copy(item, folder / item.name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["padding_side"] = "left"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return QAModel(folder)


def expected_answers(qa: QAModel, question: str, context: str, **kwargs) -> list[dict]:
    """The pipeline's answers as a list; the step-for-step stand-in where transformers has no such pipeline."""
    if not HAS_PIPELINE:
        return reference_answers(qa, question, context, **kwargs)
    result = qa.pipeline(question=question, context=context, **kwargs)
    return result if isinstance(result, list) else [result]


# --- the served side ----------------------------------------------------------------


def served_answers(
    qa_module: ModuleType,
    qa: QAModel,
    question: str,
    context: str,
    *,
    max_seq_len: int | None = None,
    doc_stride: int | None = None,
    **decode_kwargs,
) -> tuple[list[dict], dict[str, np.ndarray]]:
    """Tokenize with tokenizer.json only, run all windows as one right-padded batch, decode. The question's place
    and the CLS id kept answerable come from the head generation reads (the step's config parameters)."""
    from tokenizers import Tokenizer

    from tritonize import tasks
    from tritonize.folder import ModelFolder
    from tritonize.spec.options import GenerateOptions

    folder = ModelFolder.read(qa.folder)
    head = tasks.detect(folder).detector.read_head(folder, GenerateOptions(model=str(qa.folder)))
    backend = Tokenizer.from_file(str(qa.folder / "tokenizer.json"))
    max_seq_len = qa_module.default_max_seq_len(qa.config["model_max_length"]) if max_seq_len is None else max_seq_len
    doc_stride = qa_module.default_doc_stride(max_seq_len) if doc_stride is None else doc_stride
    question_first = head.question_first
    tokenizer = qa_module.window_tokenizer(backend, max_seq_len, doc_stride, question_first=question_first)
    windows = qa_module.tokenize_pair(
        tokenizer,
        question,
        context,
        cls_token_id=head.cls_token_id,
        question_first=question_first,
    )
    pad_id = backend.token_to_id(qa.config["pad_token"])
    arrays = qa_module.stack_windows(windows, pad_token_id=pad_id, length=max_seq_len)
    names = [k for k in qa_module.MODEL_INPUT_KEYS if k in qa.tokenizer.model_input_names]
    with torch.no_grad():
        output = qa.model(**{k: torch.from_numpy(arrays[k]) for k in names})
    answers = qa_module.decode_answers(
        context,
        output.start_logits.numpy(),
        output.end_logits.numpy(),
        arrays,
        question_first=question_first,
        pad_token_id=pad_id,
        **decode_kwargs,
    )
    return answers, arrays


def assert_same_answers(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected), (got, expected)
    for g, e in zip(got, expected):
        assert (g["answer"], g["start"], g["end"]) == (e["answer"], e["start"], e["end"]), (got, expected)
        assert g["score"] == pytest.approx(e["score"], abs=1e-4)
        assert type(g["score"]) is float and type(g["start"]) is int and type(g["end"]) is int
    json.dumps(got)  # JSON-able as it is


# --- tests ------------------------------------------------------------------------------


@pytest.mark.parametrize("pair", list(PAIRS))
def test_windows_are_the_pipelines_tokenization(qa_module, qa: QAModel, pair: str) -> None:
    question, context = PAIRS[pair]
    _, arrays = served_answers(qa_module, qa, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE)
    encoded = pipeline_encoding(qa.tokenizer, question, context, MAX_LENGTH, STRIDE)
    assert arrays["input_ids"].shape[0] == len(encoded["input_ids"])
    if pair == "long":
        assert len(encoded["input_ids"]) >= 4, "the long context must span several windows"
    for i, ids in enumerate(encoded["input_ids"]):
        n = len(ids)
        assert arrays["attention_mask"][i].sum() == n
        assert arrays["input_ids"][i, :n].tolist() == list(ids)
        assert arrays["token_type_ids"][i, :n].tolist() == list(encoded["token_type_ids"][i])
        assert [tuple(o) for o in arrays["offsets"][i, :n].tolist()] == [tuple(o) for o in encoded["offset_mapping"][i]]
        sequence_ids = [-1 if s is None else s for s in encoded.sequence_ids(i)]
        assert arrays["sequence_ids"][i, :n].tolist() == sequence_ids
        assert arrays["word_ids"][i, :n].tolist() == [-1 if w is None else w for w in encoded.word_ids(i)]
        p_mask = [int(s != 1) for s in sequence_ids]
        for cls_index in np.nonzero(np.array(ids) == qa.tokenizer.cls_token_id)[0]:
            p_mask[cls_index] = 0
        assert arrays["p_mask"][i, :n].tolist() == p_mask
        assert (arrays["p_mask"][i, n:] == 1).all() and (arrays["attention_mask"][i, n:] == 0).all()


@pytest.mark.parametrize("pair", list(PAIRS))
def test_answer_is_the_pipelines(qa_module, qa: QAModel, pair: str) -> None:
    question, context = PAIRS[pair]
    got, _ = served_answers(qa_module, qa, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE)
    expected = expected_answers(qa, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE)
    assert_same_answers(got, expected)
    assert got[0]["answer"] == context[got[0]["start"] : got[0]["end"]]


@pytest.mark.parametrize(
    "options",
    [
        {"top_k": 5},
        {"top_k": 3, "handle_impossible_answer": True},
        {"top_k": 4, "align_to_words": False},
        {"top_k": 2, "max_answer_len": 2},
    ],
    ids=["top5", "top3-impossible", "top4-tokens", "top2-short-answers"],
)
def test_options_on_a_long_context(qa_module, qa: QAModel, options: dict) -> None:
    """Several windows overlap, so equal answers are merged across windows: the scores must add up alike."""
    question, context = PAIRS["long"]
    got, _ = served_answers(qa_module, qa, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE, **options)
    expected = expected_answers(qa, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE, **options)
    assert_same_answers(got, expected)


@pytest.mark.parametrize(
    "question,context,min_windows",
    [(*PAIRS["whitespace_at_ends"], 1), ("which model is fast?", long_context(1, 3), 2)],
    ids=["one-window", "several-windows"],
)
def test_impossible_answer_is_scored_as_the_pipeline(
    qa_module, qa: QAModel, question: str, context: str, min_windows: int
) -> None:
    """With every answer listed, the null answer ("", the lowest CLS start x CLS end of all windows) is there."""
    # Short windows keep "every answer" few enough to list them all.
    options = {"max_seq_len": 32, "doc_stride": 8, "top_k": 10000, "handle_impossible_answer": True}
    got, arrays = served_answers(qa_module, qa, question, context, **options)
    assert arrays["input_ids"].shape[0] >= min_windows
    expected = expected_answers(qa, question, context, **options)
    assert any(a["answer"] == "" and a["start"] == a["end"] == 0 for a in expected)
    assert_same_answers(got, expected)


def test_decode_answer_is_the_first_of_decode_answers(qa_module, bert: QAModel) -> None:
    question, context = PAIRS["long"]
    answers, arrays = served_answers(qa_module, bert, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE)
    with torch.no_grad():
        out = bert.model(**{k: torch.from_numpy(arrays[k]) for k in qa_module.MODEL_INPUT_KEYS})
    single = qa_module.decode_answer(context, out.start_logits.numpy(), out.end_logits.numpy(), arrays)
    assert single == answers[0]


def test_pipeline_defaults_for_a_small_model(qa_module, qa: QAModel) -> None:
    """Without max_seq_len/doc_stride both sides derive them from model_max_length (64 here)."""
    question, context = PAIRS["long"]
    got, arrays = served_answers(qa_module, qa, question, context)
    assert arrays["input_ids"].shape[1] == qa.tokenizer.model_max_length
    if HAS_PIPELINE:  # the real pipeline, left to its own defaults
        expected = expected_answers(qa, question, context)
    else:  # its rule, as QuestionAnsweringPipeline.preprocess (transformers 4.x) applies it
        max_seq_len = min(qa.tokenizer.model_max_length, 384)
        expected = expected_answers(qa, question, context, max_seq_len=max_seq_len, doc_stride=min(max_seq_len // 2, 128))
    assert_same_answers(got, expected)


def test_default_rule_caps_at_the_pipelines_limits(qa_module) -> None:
    assert [qa_module.default_max_seq_len(n) for n in (64, 384, 512, 10**30)] == [64, 384, 384, 384]
    assert [qa_module.default_doc_stride(n) for n in (64, 255, 256, 384)] == [32, 127, 128, 128]


@pytest.mark.parametrize("pair", ["short", "long"])
def test_context_first_tokenizer(qa_module, bert_context_first: QAModel, pair: str) -> None:
    """padding_side="left" makes the pipeline put the context first and mask nothing: replicated too."""
    assert bert_context_first.tokenizer.padding_side == "left"
    question, context = PAIRS[pair]
    options = {"max_seq_len": MAX_LENGTH, "doc_stride": STRIDE}
    got, arrays = served_answers(qa_module, bert_context_first, question, context, top_k=3, **options)
    encoded = pipeline_encoding(bert_context_first.tokenizer, question, context, MAX_LENGTH, STRIDE)
    assert [row[: int(m.sum())].tolist() for row, m in zip(arrays["input_ids"], arrays["attention_mask"])] == [
        list(ids) for ids in encoded["input_ids"]
    ]
    assert_same_answers(got, expected_answers(bert_context_first, question, context, top_k=3, **options))


def test_padding_wider_than_the_windows_changes_nothing(qa_module, roberta: QAModel) -> None:
    """Servers pad to a bucket: the extra columns (logits included) must not move the answer."""
    question, context = PAIRS["short"]
    _, arrays = served_answers(qa_module, roberta, question, context, max_seq_len=MAX_LENGTH, doc_stride=STRIDE)
    names = [k for k in qa_module.MODEL_INPUT_KEYS if k in roberta.tokenizer.model_input_names]
    with torch.no_grad():
        out = roberta.model(**{k: torch.from_numpy(arrays[k]) for k in names})
    start, end = out.start_logits.numpy(), out.end_logits.numpy()
    padded = arrays["attention_mask"] == 0
    assert padded.any()
    garbage_start, garbage_end = start.copy(), end.copy()
    garbage_start[padded] = garbage_end[padded] = 1e4  # whatever the model made of the padding
    expected = qa_module.decode_answers(context, start, end, arrays, top_k=3)
    assert_same_answers(qa_module.decode_answers(context, garbage_start, garbage_end, arrays, top_k=3), expected)
    wider = {k: np.concatenate([v, np.zeros_like(v[:, :8])], axis=1) for k, v in arrays.items()}
    wider["p_mask"][:, -8:] = 1
    pad8 = np.full((start.shape[0], 8), 1e4, dtype=start.dtype)
    assert_same_answers(
        qa_module.decode_answers(
            context, np.hstack([start, pad8]), np.hstack([end, pad8]), wider, top_k=3
        ),
        expected,
    )


def test_served_tokenizer_json_is_the_one_transformers_loads(qa_module, bert: QAModel, tmp_path: Path) -> None:
    """tokenizer_config.json can change the tokenizer at load (here strip_accents: the BERT class rebuilds its
    normalizer): a server must ship the tokenizer transformers ends up with, serialized, not the file as found."""
    from tokenizers import Tokenizer

    for item in bert.folder.iterdir():
        if item.is_file():
            shutil.copy(item, tmp_path / item.name)
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["strip_accents"] = None  # BertTokenizerFast then strips accents, whatever tokenizer.json says
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tmp_path)
    question, context = PAIRS["non_ascii"]
    served = qa_module.window_tokenizer(Tokenizer.from_str(hf.backend_tokenizer.to_str()), MAX_LENGTH, STRIDE)
    windows = qa_module.tokenize_pair(served, question, context, cls_token_id=hf.cls_token_id)
    encoded = pipeline_encoding(hf, question, context, MAX_LENGTH, STRIDE)
    assert [w.input_ids for w in windows] == [list(ids) for ids in encoded["input_ids"]]
    assert [w.offsets for w in windows] == [[tuple(o) for o in offs] for offs in encoded["offset_mapping"]]


@pytest.mark.skipif(not HAS_PIPELINE, reason="transformers 5 removed the question-answering pipeline")
@pytest.mark.parametrize("pair", list(PAIRS))
def test_reference_is_the_pipeline(qa: QAModel, pair: str) -> None:
    question, context = PAIRS[pair]
    options = {"max_seq_len": MAX_LENGTH, "doc_stride": STRIDE, "top_k": 20, "handle_impossible_answer": True}
    assert_same_answers(reference_answers(qa, question, context, **options), expected_answers(qa, question, context, **options))
