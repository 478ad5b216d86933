"""Extractive question answering: QUESTION and CONTEXT in, `answer` (one JSON object per pair) out.

The graph is the folder's own *ForQuestionAnswering model (start and end
logits per token). A served step (tritonize/tasks/question_answering/served/question_answering.py)
splits each context into the question-answering pipeline's windows (the
question never cut, a stride of overlap), sends every window to the model
step in one call, and decodes the best span as the pipeline does. Verification
compares the logits with the model's own class, and the answers with the
pipeline's steps on transformers' own tokenization.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...serving.batching import ATTENTION_MASK
from ...spec import ModelSpec, Options, Orchestrated, TensorSpec
from ..task import (FLOAT, Detector, Ensemble, Exporter, Peer, Task, Tokens, Verifier, load_pretrained,
                   pair_token_inputs, refuse_foreign_flags)
from .contract import CONTEXT_INPUT, OUTPUT, CONTRACT, QUESTION_INPUT, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

START, END = "start_logits", "end_logits"
LONG_CONTEXT = " ".join(
    f"Paragraph {i}: the Triton server in room {i} batches requests, and its operator is named Ada {i}." for i in range(40)
)
PAIRS = [
    ("Where does Sarah live?", "Sarah lives in Berlin and works in Paris."),
    ("What does Triton serve?", "Triton serves raw strings with dynamic batching."),
    ("Wer wohnt in Zürich?", "Zoë et François vivent à Montréal, Zürich et São Paulo."),
    ("  who?  ", "   whitespace around the context   "),
    ("Who operates room 37?", LONG_CONTEXT),  # many windows
    ("What is in room 3?", LONG_CONTEXT),
]


def _graph_class():
    import torch

    class SpanLogitsGraph(torch.nn.Module):
        """The folder's own QA model: start and end logits for every token."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
            return out.start_logits, out.end_logits

    return SpanLogitsGraph


def _windows(spec: ModelSpec):
    """(max_seq_len, doc_stride) as the pipeline derives them from the model's max length."""
    from ...serving.question_answering import default_doc_stride, default_max_seq_len

    max_seq_len = default_max_seq_len(spec.max_length)
    return max_seq_len, default_doc_stride(max_seq_len)


class QuestionAnsweringDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        return folder.head_class == "ForQuestionAnswering"

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        from transformers import AutoTokenizer

        refuse_foreign_flags(options, (), "a question-answering model")
        tok = AutoTokenizer.from_pretrained(str(folder.transformer_dir), trust_remote_code=options.trust_remote_code)
        if tok.truncation_side != "right":
            raise TritonizeError(f"the tokenizer in {folder.transformer_dir} truncates on the left", hint="tritonize windows contexts from the left")
        return Head(question_first=tok.padding_side == "right", cls_token_id=tok.cls_token_id)

    def describe(self, head: Head) -> str:  # type: ignore[override]
        return "question first" if head.question_first else "context first"


class QuestionAnsweringTokens(Tokens):
    truncation = "only_second"
    truncates = False  # every context is read whole, in windows

    def token_inputs(self, folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
        return pair_token_inputs(folder, tokenizer_inputs)


class QuestionAnsweringEnsemble(Ensemble):
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, "TYPE_STRING", (1,)),)

    def graph_outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(START, FLOAT, (-1,)), TensorSpec(END, FLOAT, (-1,)))

    def first_parameters(self, spec: ModelSpec, model_step: str, max_batch_size: int) -> dict[str, str]:
        head: Head = spec.head  # type: ignore[assignment]
        max_seq_len, stride = _windows(spec)
        return {
            "max_seq_len": str(max_seq_len),
            "doc_stride": str(stride),
            "question_first": str(int(head.question_first)),
            "cls_token_id": "" if head.cls_token_id is None else str(head.cls_token_id),
            "max_answer_len": str(head.max_answer_len),
            "model_name": model_step,
            "model_inputs": ",".join(spec.input_names),
            "model_max_batch_size": str(max_batch_size),
            "start_logits": START,
            "end_logits": END,
            "question_input": QUESTION_INPUT,
            "context_input": CONTEXT_INPUT,
        }


class QuestionAnsweringExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        from transformers import AutoModelForQuestionAnswering

        return _graph_class()(load_pretrained(AutoModelForQuestionAnswering, spec, eager)).eval()

    def comparable(self, out: np.ndarray, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return out * feeds[ATTENTION_MASK]


class QuestionAnsweringVerifier(Verifier):
    def verification_rows(self) -> list[tuple[str, ...]]:
        return list(PAIRS)

    def served_check(self, spec, graph, rows, graph_out) -> dict:
        """The served windows and decoding against the pipeline's steps (transformers' own tokenizer call:
        windows, stride, offsets), both through the model's own class; the exported graph's logits are
        compared with that class separately."""
        import torch
        from tokenizers import Tokenizer
        from transformers import AutoTokenizer

        from ...serving import question_answering as qa

        head: Head = spec.head  # type: ignore[assignment]
        max_seq_len, stride = _windows(spec)
        served_tok = qa.window_tokenizer(Tokenizer.from_file(spec.tokenizer_file), max_seq_len, stride, question_first=head.question_first)
        hf = AutoTokenizer.from_pretrained(spec.source, trust_remote_code=spec.trust_remote_code)
        agree = 0
        for question, context in rows:
            answers = []
            for source in ("served", "transformers"):
                if source == "served":
                    windows = qa.tokenize_pair(served_tok, question, context, cls_token_id=head.cls_token_id,
                                               question_first=head.question_first)
                    stacked = qa.stack_windows(windows, spec.pad_token_id)
                else:
                    enc = hf(question, context, truncation="only_second", max_length=max_seq_len, stride=stride,
                             return_overflowing_tokens=True, return_offsets_mapping=True, padding="longest")
                    stacked = _stack_transformers(enc, head, spec.pad_token_id)
                with torch.no_grad():
                    start, end = graph(*(torch.from_numpy(stacked[n]) for n in spec.input_names))
                answers.append(qa.decode_answer(context, start.numpy(), end.numpy(), stacked,
                                                max_answer_len=head.max_answer_len, question_first=head.question_first))
            served, expected = answers
            agree += served is not None and expected is not None and served["answer"] == expected["answer"] and \
                (served["start"], served["end"]) == (expected["start"], expected["end"]) and abs(served["score"] - expected["score"]) <= 1e-4
        return {"reference": "question-answering pipeline steps", "rows": len(rows), "agree": int(agree), "passed": agree == len(rows)}


class QuestionAnsweringPeer(Peer):
    def doc_answers(self, spec, model, tokenizer, rows) -> tuple[list, int, int]:
        """The pipeline's steps on PyTorch (transformers 5 has no question-answering pipeline): transformers'
        tokenizer makes every pair's windows, the model scores them in one batch, the pipeline's decoding."""
        import torch

        from ...serving import question_answering as qa

        head: Head = spec.head  # type: ignore[assignment]
        max_seq_len, stride = _windows(spec)
        questions, contexts = [r[0] for r in rows], [r[1] for r in rows]
        first, second = (questions, contexts) if head.question_first else (contexts, questions)
        enc = tokenizer(first, second, truncation="only_second" if head.question_first else "only_first",
                        max_length=max_seq_len, stride=stride, return_overflowing_tokens=True,
                        return_offsets_mapping=True, padding="longest")
        stacked = _stack_transformers(enc, head, spec.pad_token_id)
        with torch.inference_mode():
            start, end = model(*(torch.from_numpy(stacked[n]) for n in spec.input_names))
        owner = np.asarray(enc["overflow_to_sample_mapping"])
        answers = []
        for i, context in enumerate(contexts):
            part = owner == i
            answers.append({OUTPUT: qa.decode_answer(context, start.numpy()[part], end.numpy()[part],
                                                     {k: v[part] for k, v in stacked.items()},
                                                     max_answer_len=head.max_answer_len,
                                                     question_first=head.question_first,
                                                     pad_token_id=spec.pad_token_id)})
        mask = stacked[ATTENTION_MASK]
        return answers, int(mask.sum()), int(mask.size)


class QuestionAnswering(Task):
    contract = CONTRACT
    summary = "QUESTION and CONTEXT in (one pair per row), `answer` (BYTES [N, 1], JSON: answer, score, start, end) out"
    serves = "*ForQuestionAnswering folders"
    pipeline = Orchestrated("question_answering")  # the first step windows, calls the model step, and decodes
    Detector = QuestionAnsweringDetector
    Tokens = QuestionAnsweringTokens
    Ensemble = QuestionAnsweringEnsemble
    Exporter = QuestionAnsweringExporter
    Verifier = QuestionAnsweringVerifier
    Peer = QuestionAnsweringPeer


def _stack_transformers(enc, head: Head, pad_id: int) -> dict[str, np.ndarray]:
    """transformers' windows in the arrays decoding reads (what the pipeline's preprocess builds)."""
    n, width = len(enc["input_ids"]), max(len(x) for x in enc["input_ids"])
    out = {
        "input_ids": np.asarray(enc["input_ids"], dtype=np.int64),
        "attention_mask": np.asarray(enc["attention_mask"], dtype=np.int64),
        "token_type_ids": np.asarray(enc.get("token_type_ids", np.zeros((n, width))), dtype=np.int64),
        "p_mask": np.ones((n, width), dtype=np.int64),
        "offsets": np.zeros((n, width, 2), dtype=np.int64),
        "word_ids": np.full((n, width), -1, dtype=np.int64),
        "sequence_ids": np.full((n, width), -1, dtype=np.int64),
    }
    for i in range(n):
        seq = [-1 if s is None else s for s in enc.sequence_ids(i)]
        words = [-1 if w is None else w for w in enc.word_ids(i)]
        k = len(seq)
        out["sequence_ids"][i, :k] = seq
        out["word_ids"][i, :k] = words
        out["offsets"][i, :k] = np.asarray(enc["offset_mapping"][i], dtype=np.int64)
        out["p_mask"][i, :k] = [int(s != 1) if head.question_first else 0 for s in seq]
        if head.cls_token_id is not None:
            out["p_mask"][i, :k][np.asarray(enc["input_ids"][i][:k]) == head.cls_token_id] = 0
    return out


TASK = QuestionAnswering()
