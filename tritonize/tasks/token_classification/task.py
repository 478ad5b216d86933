"""Token classification (NER): TEXT in, `entities` (one JSON list per text) out.

The graph is the folder's own *ForTokenClassification model (per-token logits).
A served step after it (tritonize/tasks/token_classification/served/token_classification.py) turns the
logits, with the character offsets and special-tokens mask from the tokenizer
step, into what transformers' pipeline("token-classification") returns, with
the aggregation chosen at generation. Verification compares the logits with
the model's own class, and the answers with the pipeline itself.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...serving.batching import ATTENTION_MASK, OFFSETS, SPECIAL_TOKENS_MASK
from ...spec import TEXT_INPUT, ModelSpec, Options, TensorSpec, TokenizeModelPost
from ..task import FLOAT, Detector, Ensemble, Exporter, Peer, Task, Verifier, load_pretrained, refuse_foreign_flags
from .options import AGGREGATIONS, OPTIONS
from .contract import OUTPUT, CONTRACT, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

LOGITS = "logits"
DEFAULT_AGGREGATION = "simple"


def _graph_class():
    import torch

    class TokenLogitsGraph(torch.nn.Module):
        """The folder's own token classifier: logits for every token."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).logits

    return TokenLogitsGraph


class TokenClassificationDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        return folder.head_class == "ForTokenClassification"

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, self.task.own_options, "a token classifier")
        aggregation = options.aggregation or DEFAULT_AGGREGATION
        if aggregation not in AGGREGATIONS:
            raise TritonizeError(f"unknown aggregation {aggregation!r}", hint=f"use one of: {', '.join(AGGREGATIONS)}")
        id2label = folder.config.get("id2label") or {}
        if len(id2label) < 2:
            raise TritonizeError("a token classifier needs at least two labels (id2label in config.json)")
        return Head(tuple(str(id2label[k]) for k in sorted(id2label, key=lambda k: int(k))), aggregation)

    def describe(self, head: Head) -> str:  # type: ignore[override]
        return f"{len(head.labels)} labels, {head.aggregation} aggregation"


class TokenClassificationEnsemble(Ensemble):
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, "TYPE_STRING", (1,)),)

    def graph_outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(LOGITS, FLOAT, (-1, len(head.labels))),)

    def post_parameters(self, spec: ModelSpec) -> dict[str, str]:
        from ...spec import TOKENIZER_FILE

        head: Head = spec.head  # type: ignore[assignment]
        return {
            "tokenizer_file": TOKENIZER_FILE,
            "labels": json.dumps(list(head.labels), ensure_ascii=False),
            "aggregation": head.aggregation,
            "text_input": TEXT_INPUT,
            "logits_input": LOGITS,
        }


class TokenClassificationExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        from transformers import AutoModelForTokenClassification

        return _graph_class()(load_pretrained(AutoModelForTokenClassification, spec, eager)).eval()

    def comparable(self, out: np.ndarray, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return out * feeds[ATTENTION_MASK][..., None]


class TokenClassificationVerifier(Verifier):
    def served_check(self, spec, graph, rows, graph_out) -> dict:
        """The served post-processing on the graph's logits against pipeline("token-classification")."""
        from tokenizers import Tokenizer
        from transformers import pipeline

        from ...serving.token_classification import entities, unk_token_id

        head: Head = spec.head  # type: ignore[assignment]
        tok = Tokenizer.from_file(spec.tokenizer_file)
        tok.no_padding()
        tok.enable_truncation(spec.max_length)
        pipe = pipeline("token-classification", model=spec.source, aggregation_strategy=head.aggregation, device="cpu")
        agree = 0
        for r, (text,) in enumerate(rows):
            enc = tok.encode(text)
            n = len(enc.ids)
            served = entities(text, enc.ids, enc.offsets, enc.special_tokens_mask, graph_out[0][r, :n],
                              list(head.labels), head.aggregation, tok, unk_id=unk_token_id(tok))
            expected = [{k: (float(v) if isinstance(v, (np.floating, float)) else v.item() if hasattr(v, "item") else v)
                         for k, v in e.items()} for e in pipe(text)]
            agree += _same(served, expected)
        return {"reference": "transformers pipeline", "rows": len(rows), "agree": agree, "passed": agree == len(rows)}


class TokenClassificationPeer(Peer):
    def doc_answers(self, spec, model, tokenizer, rows) -> tuple[list, int, int]:
        """The pipeline's steps on PyTorch: transformers' tokenizer, the model's logits, the pipeline's decoding."""
        import torch

        from ...serving.token_classification import entities

        head: Head = spec.head  # type: ignore[assignment]
        texts = [r[0] for r in rows]
        batch = tokenizer(texts, padding=True, truncation=True, max_length=spec.max_length, return_tensors="pt")
        with torch.inference_mode():
            logits = model(batch["input_ids"], batch["attention_mask"]).numpy()
        mask = batch["attention_mask"].numpy()
        answers = []
        for r, text in enumerate(texts):
            keep = mask[r].nonzero()[0]
            enc = batch.encodings[r]
            answers.append({OUTPUT: entities(text, [enc.ids[i] for i in keep], [enc.offsets[i] for i in keep],
                                             [enc.special_tokens_mask[i] for i in keep], logits[r, keep],
                                             list(head.labels), head.aggregation, tokenizer.backend_tokenizer)})
        return answers, int(mask.sum()), int(mask.size)


class TokenClassification(Task):
    contract = CONTRACT
    summary = "TEXT in, `entities` (BYTES [N, 1], JSON: entity_group or entity, score, word, start, end) out"
    serves = "*ForTokenClassification folders"
    pipeline = TokenizeModelPost("token_classification", token_extras=(OFFSETS, SPECIAL_TOKENS_MASK))
    own_options = OPTIONS
    Detector = TokenClassificationDetector
    Ensemble = TokenClassificationEnsemble
    Exporter = TokenClassificationExporter
    Verifier = TokenClassificationVerifier
    Peer = TokenClassificationPeer


def _same(served: list[dict], expected: list[dict], atol: float = 1e-4) -> bool:
    """Same spans, labels and words; scores within atol."""
    if len(served) != len(expected):
        return False
    for a, b in zip(served, expected):
        if set(a) != set(b) or abs(float(a["score"]) - float(b["score"])) > atol:
            return False
        if any(a[k] != b[k] for k in a if k != "score"):
            return False
    return True


TASK = TokenClassification()
