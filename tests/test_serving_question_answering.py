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
import random
import shutil
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tiny_models import WORDS, build_tokenizer

MODULE_FILE = Path(__file__).resolve().parents[1] / "tritonize" / "serving" / "question_answering.py"
MAX_LENGTH = 64  # the model's (and so the served) max length: small, so long contexts make many windows
STRIDE = 16
HAS_PIPELINE = importlib.util.find_spec("transformers.pipelines.question_answering") is not None


def _long_context(seed: int, sentences: int) -> str:
    rng = random.Random(seed)
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 11))).capitalize() + rng.choice(".!?;")
        for _ in range(sentences)
    )


PAIRS = {
    "short": ("what jumps over the dog?", "The quick brown fox jumps over the lazy dog."),
    "non_ascii": ("où est le café ?", "Le café est à côté de la gare, près du marché. 日本語 über straße, ça va."),
    "whitespace_at_ends": ("  who said hello?  ", "   \n hello world, said the model to the server.\t  "),
    "long": ("which model is fast?", _long_context(0, 30)),
}


# --- models -------------------------------------------------------------------


def _spread_qa_head(model, seed: int) -> None:
    """A random model's logits are nearly flat: spread them so the best span wins by a clear margin."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head = model.qa_outputs
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator))
        head.bias.copy_(torch.randn(head.bias.shape, generator=generator))


def _build_bert(folder: Path) -> Path:
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertForQuestionAnswering, BertTokenizerFast

    build_tokenizer(folder / "raw", MAX_LENGTH)
    backend = Tokenizer.from_file(str(folder / "raw" / "tokenizer.json"))
    # strip_accents as in tokenizer.json: transformers 5 rebuilds the normalizer from tokenizer_config.json on load.
    BertTokenizerFast(tokenizer_object=backend, model_max_length=MAX_LENGTH, strip_accents=False).save_pretrained(folder)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=backend.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    model = BertForQuestionAnswering(config).eval()
    _spread_qa_head(model, 1)
    model.save_pretrained(folder)
    return folder


def _build_roberta(folder: Path) -> Path:
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import (
        RobertaConfig,
        RobertaForQuestionAnswering,
        RobertaTokenizerFast,
    )

    special = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    backend = Tokenizer(models.BPE(unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [_long_context(seed, 4) for seed in range(40)] + [c for _, c in PAIRS.values()]
    backend.train_from_iterator(corpus, trainer)
    backend.post_processor = processors.RobertaProcessing(
        ("</s>", backend.token_to_id("</s>")), ("<s>", backend.token_to_id("<s>")), trim_offsets=True
    )
    RobertaTokenizerFast(tokenizer_object=backend, model_max_length=MAX_LENGTH).save_pretrained(folder)
    torch.manual_seed(0)
    config = RobertaConfig(
        vocab_size=backend.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=130,  # RoBERTa's positions start after the padding index
        type_vocab_size=1,
        pad_token_id=backend.token_to_id("<pad>"),
        bos_token_id=backend.token_to_id("<s>"),
        eos_token_id=backend.token_to_id("</s>"),
    )
    model = RobertaForQuestionAnswering(config).eval()
    _spread_qa_head(model, 2)
    model.save_pretrained(folder)
    return folder


class QAModel:
    """A model folder with its model and transformers tokenizer loaded once."""

    def __init__(self, folder: Path):
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        self.folder = folder
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        self.model = AutoModelForQuestionAnswering.from_pretrained(folder).eval()
        self.config = json.loads((folder / "tokenizer_config.json").read_text())
        self._pipeline = None

    @property
    def pipeline(self):
        if self._pipeline is None:
            from transformers import pipeline

            self._pipeline = pipeline("question-answering", model=str(self.folder), tokenizer=str(self.folder))
        return self._pipeline


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
def bert(tmp_path_factory) -> QAModel:
    return QAModel(_build_bert(tmp_path_factory.mktemp("bert-qa")))


@pytest.fixture(scope="module")
def roberta(tmp_path_factory) -> QAModel:
    return QAModel(_build_roberta(tmp_path_factory.mktemp("roberta-qa")))


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


@pytest.fixture(params=["bert", "roberta"])
def qa(request) -> QAModel:
    return request.getfixturevalue(request.param)


# --- the expected side: the pipeline ----------------------------------------------


def _select_starts_ends():
    try:
        from transformers.pipelines.question_answering import select_starts_ends
    except ImportError:  # transformers 5: the same function lives on in document question answering
        from transformers.pipelines.document_question_answering import (
            select_starts_ends,
        )
    return select_starts_ends


def pipeline_encoding(tokenizer, question: str, context: str, max_seq_len: int, doc_stride: int):
    """The pipeline's own tokenizer call (QuestionAnsweringPipeline.preprocess, fast tokenizers)."""
    question_first = tokenizer.padding_side == "right"
    return tokenizer(
        text=question if question_first else context,
        text_pair=context if question_first else question,
        padding="do_not_pad",
        truncation="only_second" if question_first else "only_first",
        max_length=max_seq_len,
        stride=doc_stride,
        return_token_type_ids=True,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
        return_special_tokens_mask=True,
    )


def reference_answers(
    qa: QAModel,
    question: str,
    context: str,
    *,
    max_seq_len: int,
    doc_stride: int,
    top_k: int = 1,
    max_answer_len: int = 15,
    handle_impossible_answer: bool = False,
    align_to_words: bool = True,
) -> list[dict]:
    """transformers 4.x QuestionAnsweringPipeline, fast-tokenizer path, step for step."""
    tokenizer, select_starts_ends = qa.tokenizer, _select_starts_ends()
    question_first = tokenizer.padding_side == "right"
    encoded = pipeline_encoding(tokenizer, question, context, max_seq_len, doc_stride)
    num_spans = len(encoded["input_ids"])
    p_mask = [[tok != 1 if question_first else 0 for tok in encoded.sequence_ids(i)] for i in range(num_spans)]
    min_null_score, answers = 1000000, []
    for i in range(num_spans):
        ids = encoded["input_ids"][i]
        if tokenizer.cls_token_id is not None:
            for cls_index in np.nonzero(np.array(ids) == tokenizer.cls_token_id)[0]:
                p_mask[i][cls_index] = 0
        inputs = {k: torch.tensor(encoded[k][i]).unsqueeze(0) for k in tokenizer.model_input_names}
        with torch.no_grad():
            output = qa.model(**inputs)
        pre_topk = top_k * 2 + 10 if align_to_words else top_k
        starts, ends, scores, min_null_score = select_starts_ends(
            output.start_logits,
            output.end_logits,
            torch.tensor(p_mask[i]).unsqueeze(0),
            inputs["attention_mask"].numpy(),
            min_null_score,
            pre_topk,
            handle_impossible_answer,
            max_answer_len,
        )
        enc = encoded.encodings[i]
        offset = (np.array(ids) == tokenizer.pad_token_id).sum() if tokenizer.padding_side == "left" else 0
        for s, e, score in zip(starts, ends, scores):
            s, e = s - offset, e - offset
            try:
                if not align_to_words:
                    raise ValueError
                start_index = enc.word_to_chars(enc.token_to_word(s), sequence_index=1 if question_first else 0)[0]
                end_index = enc.word_to_chars(enc.token_to_word(e), sequence_index=1 if question_first else 0)[1]
            except Exception:  # noqa: BLE001 - the pipeline's own fallback, caught as broadly
                start_index, end_index = enc.offsets[s][0], enc.offsets[e][1]
            target = context[start_index:end_index]
            same = next((a for a in answers if a["answer"].lower() == target.lower()), None)
            if same:
                same["score"] += score.item()
            else:
                answers.append({"score": score.item(), "start": start_index, "end": end_index, "answer": target})
    if handle_impossible_answer:
        answers.append({"score": min_null_score, "start": 0, "end": 0, "answer": ""})
    return sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]


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
    """Tokenize with tokenizer.json only, run all windows as one right-padded batch, decode."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_file(str(qa.folder / "tokenizer.json"))
    max_seq_len = qa_module.default_max_seq_len(qa.config["model_max_length"]) if max_seq_len is None else max_seq_len
    doc_stride = qa_module.default_doc_stride(max_seq_len) if doc_stride is None else doc_stride
    question_first = qa_module.is_question_first(qa.config.get("padding_side", "right"))
    tokenizer = qa_module.window_tokenizer(backend, max_seq_len, doc_stride, question_first=question_first)
    windows = qa_module.tokenize_pair(
        tokenizer,
        question,
        context,
        cls_token_id=qa_module.cls_token_id_from_config(backend, qa.config),
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
    [(*PAIRS["whitespace_at_ends"], 1), ("which model is fast?", _long_context(1, 3), 2)],
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
