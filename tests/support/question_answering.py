"""Tiny random question-answering folders (BERT with WordPiece, RoBERTa with a byte-level BPE) and the
question-answering pipeline's answers, step for step, where transformers no longer ships the pipeline."""


from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.tiny_models import WORDS, build_tokenizer

MAX_LENGTH = 64  # the model's (and so the served) max length: small, so long contexts make many windows


def long_context(seed: int, sentences: int) -> str:
    rng = random.Random(seed)
    return " ".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 11))).capitalize() + rng.choice(".!?;")
        for _ in range(sentences)
    )


PAIRS = {
    "short": ("what jumps over the dog?", "The quick brown fox jumps over the lazy dog."),
    "non_ascii": ("où est le café ?", "Le café est à côté de la gare, près du marché. 日本語 über straße, ça va."),
    "whitespace_at_ends": ("  who said hello?  ", "   \n hello world, said the model to the server.\t  "),
    "long": ("which model is fast?", long_context(0, 30)),
}


# --- models -------------------------------------------------------------------


def _spread_qa_head(model, seed: int) -> None:
    """A random model's logits are nearly flat: spread them so the best span wins by a clear margin."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head = model.qa_outputs
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator))
        head.bias.copy_(torch.randn(head.bias.shape, generator=generator))


def build_bert(folder: Path) -> Path:
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


def build_roberta(folder: Path) -> Path:
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
    corpus = [long_context(seed, 4) for seed in range(40)] + [c for _, c in PAIRS.values()]
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
