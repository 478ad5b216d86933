"""Reranking: (QUERY, TEXT) pairs in, the model's `logit` per pair out.

Two layouts of a sentence-transformers CrossEncoder are served, and the reference of both is
`CrossEncoder.predict`: with `activation_fn=Identity()` for the graph's logits, and as it scores by default for the
activation (sigmoid or none, as the folder declares) that contract.py's `activate` applies after the graph, in
the API's ranking routes and the client's `rerank`:

* a sequence classifier (BERT-style rerankers, Qwen3-Reranker-seq-cls): the tokenizer step encodes each pair
  with the model's own pair template (with token_type_ids where the model has segment embeddings) and cuts the
  document, never the query; the graph is the folder's sequence-classification model, its one logit;
* a causal LM scored by LogitScore (Qwen3-Reranker as sentence-transformers 6 saves it:
  `Transformer(text-generation)` -> `LogitScore`, a chat template in the folder): the tokenizer step renders
  each pair through the folder's own template (fixed parts taken at generation, serving/chat.py), and the
  graph returns the declared score at each row's last real token: the logit of the "yes" token minus that of
  the "no" token (or the one token's logit).

The causal graph is the decoder run once over the whole rendered pair, without a KV cache (no past key values
in or out): every pair pays for the template's fixed tokens and the query again, as the library's own predict
does. Only the LM head's rows of the declared tokens are in the graph ([2, hidden], not [vocab, hidden]).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...serving.chat import PARAMETER as PAIR_TEMPLATE
from ...serving.chat import PairTemplate
from ...spec import ModelSpec, Options, TensorSpec
from ..task import (FLOAT, DerivedAnswer, Detector, Ensemble, Exporter, Peer, Task, Tokens, Verifier, library_model,
                   load_pretrained, pair_token_inputs, refuse_foreign_flags)
from .contract import ACTIVATION_PARAMETER, CAUSAL, OUTPUT, CONTRACT, Activation, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

# The dotted paths sentence-transformers writes for a CrossEncoder's activation.
ACTIVATIONS: dict[str, Activation] = {
    "torch.nn.modules.activation.Sigmoid": "sigmoid",
    "torch.nn.modules.linear.Identity": "identity",
}
PAIRS = [
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("What is the capital of France?", "The quick brown fox jumps over the lazy dog."),
    ("how to deploy a transformer", "Triton serves raw strings with dynamic batching."),
    ("Ünïcödé café", "日本語のテキストも正しくトークン化されるべきです。"),
    ("short", "   leading and trailing whitespace   "),
    ("a query", " ".join(["This document is long and is cut at the maximum length, never the query."] * 40)),
    ("emoji 🚀", "Emoji and symbols 🚀✨ — “quotes”, ‘apostrophes’ and ∑ math ≤ ≥."),
    ("machine learning in production", " ".join(f"word{i}" for i in range(300))),
]


CAUSAL_MODULES = ("Transformer", "LogitScore")
# Stand-ins for the query and the document while the template is rendered once at generation: plain text that a
# template passes through as it passes real text (verification checks that it does, on real pairs).
QUERY_MARK, DOCUMENT_MARK = "TRITONIZEQUERYMARK", "TRITONIZEDOCUMENTMARK"
# sentence-transformers' fillers for the template's closing tokens: the tokens two renders share at the end.
SUFFIX_FILLERS = ("0", "1 2 3 4")


def _activation_path(folder: ModelFolder) -> str | None:
    """Where each sentence-transformers release kept the activation, newest first."""
    for declared in (
        (folder.config.get("sentence_transformers") or {}).get("activation_fn"),
        folder.config.get("sbert_ce_default_activation_function"),
        folder.st_config.get("activation_fn"),
    ):
        if declared:
            return str(declared)
    return None


def _graph_class():
    import torch

    class LogitScoreGraph(torch.nn.Module):
        """The folder's causal LM without a KV cache, read at each row's last real token (right or left padding):
        the LM head's rows of the declared tokens (the model's final logit soft-capping, where it has one),
        LogitScore's difference: the logit the CrossEncoder's activation reads."""

        def __init__(self, model, token_ids: tuple[int, ...]):
            super().__init__()
            self.model = model
            head = model.get_output_embeddings()
            ids = torch.tensor(token_ids)
            self.register_buffer("rows", head.weight.detach()[ids].clone())
            bias = getattr(head, "bias", None)
            self.register_buffer("bias", bias.detach()[ids].clone() if bias is not None else torch.zeros(len(ids)))
            self.softcap = getattr(model.config, "final_logit_softcapping", None)

        def forward(self, input_ids, attention_mask):
            hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)[0]
            positions = torch.arange(attention_mask.shape[1], device=attention_mask.device)
            last = (attention_mask * positions).amax(dim=1)  # the last real token, whichever side is padded
            logits = hidden[torch.arange(hidden.shape[0], device=hidden.device), last] @ self.rows.T + self.bias
            if self.softcap:
                logits = torch.tanh(logits / self.softcap) * self.softcap
            return logits[:, :1] - logits[:, 1:] if logits.shape[1] == 2 else logits

    class LogitGraph(torch.nn.Module):
        """The folder's sequence classifier: its one logit (the activation is contract.py's, after the graph)."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids=None):
            kwargs = {"token_type_ids": token_type_ids} if token_type_ids is not None else {}
            return self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs).logits

    return LogitGraph, LogitScoreGraph


class RerankDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        if folder.head_class == "ForCausalLM":
            return folder.is_cross_encoder
        return folder.head_class == "ForSequenceClassification" and (folder.is_cross_encoder or folder.num_labels == 1)

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, (), "a reranker")
        activation = _activation(folder)
        if folder.head_class == "ForCausalLM":
            return _causal_head(folder, activation)
        if folder.num_labels != 1:
            raise TritonizeError(
                f"a reranker scores with one label; {folder.root} has {folder.num_labels}",
                hint="tritonize serves one-score CrossEncoders; a multi-label one is a classifier",
            )
        return Head(activation)

    def describe(self, head: Head) -> str:  # type: ignore[override]
        if head.layout != CAUSAL:
            return f"pairs, logit, {head.activation} score"
        logit = (f"logit[{head.true_token_id}] - logit[{head.false_token_id}]" if head.false_token_id >= 0
                 else f"logit[{head.true_token_id}]")
        return (f"pairs through the chat template (+{head.template_tokens} tokens each), causal LM, {logit} at the "
                f"last token, {head.activation} score")


class RerankTokens(Tokens):
    truncation = "only_second"  # the document is cut, never the query

    def truncation_for(self, head: Head) -> str | None:  # type: ignore[override]
        return "longest_first" if head.layout == CAUSAL else self.truncation

    def pair_template(self, head: Head) -> PairTemplate | None:  # type: ignore[override]
        return PairTemplate(*head.template, head.suffix_ids) if head.layout == CAUSAL else None

    def token_inputs(self, folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
        return pair_token_inputs(folder, tokenizer_inputs)


class RerankEnsemble(Ensemble):
    def first_parameters(self, spec: ModelSpec, model_step: str, max_batch_size: int) -> dict[str, str]:
        template = self.task.tokens.pair_template(spec.head)  # type: ignore[arg-type]
        return {PAIR_TEMPLATE: template.to_json()} if template else {}

    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, FLOAT, (1,)),)

    def ensemble_parameters(self, head: Head) -> dict[str, str]:  # type: ignore[override]
        """The activation, for clients that score over Triton (the client's `rerank`)."""
        return {ACTIVATION_PARAMETER: head.activation}


class RerankExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

        head: Head = spec.head  # type: ignore[assignment]
        logit, logit_score = _graph_class()
        if head.layout == CAUSAL:
            model = load_pretrained(AutoModelForCausalLM, spec, eager)
            return logit_score(model, head.token_ids).eval()
        model = load_pretrained(AutoModelForSequenceClassification, spec, eager)
        return logit(model).eval()


class RerankVerifier(Verifier):
    def verification_rows(self) -> list[tuple[str, ...]]:
        return list(PAIRS)

    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """The CrossEncoder's logits: its predict with the identity as the activation."""
        import torch

        return "sentence-transformers CrossEncoder", _predict(_cross_encoder(spec), rows, activation_fn=torch.nn.Identity())

    def derived_answers(self, spec: ModelSpec, rows: list[tuple[str, ...]]) -> tuple[DerivedAnswer, ...]:
        """The score: the head's activation of the graph's logits against `CrossEncoder.predict` as it scores by
        default (none where the head applies no activation: the score is the logit)."""
        head: Head = spec.head  # type: ignore[assignment]
        if head.activation == "identity":
            return ()
        return (DerivedAnswer(f"{head.activation} score", _predict(_cross_encoder(spec), rows),
                           lambda out: head.activate(out).astype(np.float32)),)

    def served_check(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]],
                     graph_out: list[np.ndarray]) -> dict | None:
        """A causal reranker's tokens: the served step's rendering, tokenization and truncation of each pair
        against the CrossEncoder's own preprocess (its chat template, its suffix restore), id for id."""
        head: Head = spec.head  # type: ignore[assignment]
        if head.layout != CAUSAL:
            return None
        from ...serving.batching import INPUT_IDS
        from ...serving.tokenizer import TextEncoder

        model = _cross_encoder(spec)
        prompt = model.prompts.get(model.default_prompt_name) if model.default_prompt_name else None
        encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id,
                              spec.input_names, "longest_first", template=self.task.tokens.pair_template(head))
        agree = 0
        for row in rows:
            expected = model[0].preprocess([tuple(row)], prompt=prompt)[INPUT_IDS][0].tolist()
            agree += encoder.encode([tuple(row)], width=0)[INPUT_IDS][0].tolist() == expected
        return {"reference": "sentence-transformers CrossEncoder preprocess (token ids)", "rows": len(rows),
                "agree": agree, "passed": agree == len(rows)}


class RerankPeer(Peer):
    def doc_answers(self, spec: ModelSpec, model: Any, tokenizer: Any, rows: list[tuple[str, ...]]) -> tuple[list, int, int]:
        """A causal reranker in a hand-written PyTorch server: each pair rendered through the template, tokenized
        without special tokens, cut and closed as the library does, the batch padded as its tokenizer pads."""
        head: Head = spec.head  # type: ignore[assignment]
        if head.layout != CAUSAL:
            return super().doc_answers(spec, model, tokenizer, rows)
        import torch

        template = self.task.tokens.pair_template(head)
        ids = [template.restore(tokenizer(template.render(*row), add_special_tokens=False, truncation=True,
                                          max_length=spec.max_length)["input_ids"], spec.max_length) for row in rows]
        batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
        with torch.inference_mode():
            scores = model(batch["input_ids"], batch["attention_mask"])
        mask = batch["attention_mask"]
        return [{OUTPUT: s} for s in scores.tolist()], int(mask.sum()), int(mask.numel())


class Rerank(Task):
    contract = CONTRACT
    summary = "QUERY and TEXT in (one pair per row), `logit` (FP32 [N, 1]) out; the score is its activation"
    serves = ("sentence-transformers CrossEncoder folders (a sequence classifier, or a causal LM with LogitScore and a "
              "chat template) and one-label *ForSequenceClassification folders")
    Detector = RerankDetector
    Tokens = RerankTokens
    Ensemble = RerankEnsemble
    Exporter = RerankExporter
    Verifier = RerankVerifier
    Peer = RerankPeer


def _cross_encoder(spec: ModelSpec) -> Any:
    from sentence_transformers import CrossEncoder

    return library_model(CrossEncoder, spec, max_length=spec.max_length)


def _predict(model: Any, rows: list[tuple[str, ...]], **kwargs: Any) -> np.ndarray:
    """CrossEncoder.predict on the rows, [rows, 1] float32."""
    scores = model.predict([tuple(r) for r in rows], batch_size=len(rows), convert_to_numpy=True, **kwargs)
    return np.asarray(scores, dtype=np.float32).reshape(len(rows), 1)


def _activation(folder: ModelFolder) -> Activation:
    path = _activation_path(folder)
    if path is None:
        return "sigmoid"  # CrossEncoder's default for one label (LogitScore gives one)
    if path not in ACTIVATIONS:
        raise TritonizeError(f"unsupported CrossEncoder activation {path!r}", hint=f"supported: {', '.join(ACTIVATIONS)}")
    return ACTIVATIONS[path]


CAUSAL_SERVED = "a causal-LM CrossEncoder as sentence-transformers saves it: Transformer(text-generation) -> LogitScore, with a chat template"


def _causal_head(folder: ModelFolder, activation: Activation) -> Head:
    """A causal-LM CrossEncoder: its LogitScore tokens, and its chat template as fixed parts around the pair."""
    kinds = folder.module_kinds
    if kinds != CAUSAL_MODULES:
        raise TritonizeError(f"unsupported CrossEncoder modules {' -> '.join(kinds) or '(none)'} in {folder.root}",
                             hint=f"tritonize serves {CAUSAL_SERVED}")
    transformer, score = (folder.module_dir(m) for m in folder.modules)  # type: ignore[union-attr]
    declared = transformer / "sentence_bert_config.json"
    st = folder.json(declared) if declared.is_file() else {}
    if st.get("transformer_task") != "text-generation" or "message" not in (st.get("modality_config") or {}):
        raise TritonizeError(f"the CrossEncoder in {folder.root} does not read pairs through a chat template "
                             f"(transformer_task {st.get('transformer_task')!r})", hint=f"tritonize serves {CAUSAL_SERVED}")
    kwargs = st.get("processing_kwargs") or {}
    other = sorted(k for k, v in kwargs.items() if v and k != "chat_template")
    if other:
        raise TritonizeError(f"{declared} sets processing_kwargs {', '.join(other)}, which the served step does not apply",
                             hint="tritonize renders pairs with the chat template's own kwargs only")
    chat = dict(kwargs.get("chat_template") or {})
    restore = chat.pop("restore_suffix", True)
    cfg = folder.json(score / "config.json") if (score / "config.json").is_file() else {}
    true_id, false_id = cfg.get("true_token_id"), cfg.get("false_token_id")
    if not isinstance(true_id, int) or not (false_id is None or isinstance(false_id, int)) or \
            cfg.get("module_input_name", "causal_logits") != "causal_logits":
        raise TritonizeError(f"{score / 'config.json'} declares no LogitScore token ids on causal_logits",
                             hint=f"tritonize serves {CAUSAL_SERVED}")
    prompts = folder.st_config.get("prompts") or {}
    default = folder.st_config.get("default_prompt_name")
    prompt = str(prompts.get(default) or "") if default else ""
    fmt = ((st.get("modality_config") or {}).get("message") or {}).get("format", "auto")
    template, suffix_ids, tokens = _fixed_parts(folder, fmt, prompt, chat, restore)
    return Head(activation, CAUSAL, true_id, -1 if false_id is None else false_id, template, suffix_ids, prompt, tokens)


def _fixed_parts(folder: ModelFolder, message_format: str, prompt: str, chat_kwargs: dict,
                 restore: bool) -> tuple[tuple[str, str, str], tuple[int, ...], int]:
    """(prefix, middle, suffix) of the folder's chat template around a pair, rendered as sentence-transformers
    renders it (its own message format, the default prompt as a system message); the closing tokens it
    restores after truncation; the tokens the template adds. Refused, in one line, where the fixed parts do not
    reproduce the library's rendering of the verification pairs (a template that trims or rewrites the texts)."""
    from sentence_transformers.base.modality import InputFormatter
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder.transformer_dir))
    if not getattr(tokenizer, "chat_template", None):
        raise TritonizeError(f"the CrossEncoder in {folder.root} has no chat template", hint=f"tritonize serves {CAUSAL_SERVED}")
    formatter = InputFormatter(folder.model_type, message_format=message_format, processor=tokenizer)

    def render(query: str, document: str) -> str:
        messages = formatter.pair_to_messages((query, document))
        if prompt:
            messages = formatter.prepend_prompt_to_messages([messages], prompt)[0]
        return str(tokenizer.apply_chat_template(messages, tokenize=False, **chat_kwargs))

    rendered = render(QUERY_MARK, DOCUMENT_MARK)
    before, _, rest = rendered.partition(QUERY_MARK)
    middle, _, after = rest.partition(DOCUMENT_MARK)
    fixed = PairTemplate(before, middle, after)
    if rendered.count(QUERY_MARK) != 1 or rendered.count(DOCUMENT_MARK) != 1 or DOCUMENT_MARK in before or \
            any(render(q, d) != fixed.render(q, d) for q, d in PAIRS):
        raise TritonizeError(f"the chat template of {folder.root} does not place the query and the document verbatim, "
                             "once each, between fixed text", hint="tritonize renders pairs as fixed text around them")

    def tokens(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    suffix: list[int] = []
    if restore:  # the token suffix two skeleton renders share, as sentence-transformers derives it
        first, second = (tokens(fixed.render(f, f)) for f in SUFFIX_FILLERS)
        count = next((k for k, (a, b) in enumerate(zip(reversed(first), reversed(second))) if a != b),
                     min(len(first), len(second)))
        suffix = first[len(first) - count:] if 0 < count < min(len(first), len(second)) else []
    return (fixed.prefix, fixed.middle, fixed.suffix), tuple(suffix), len(tokens(before + middle + after))


TASK = Rerank()
