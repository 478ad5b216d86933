"""Late-interaction (ColBERT) embeddings: TEXT and its FORM (query or document) in, one vector per scored token out.

A folder sentence-transformers' MultiVectorEncoder reads (its own layout, PyLate 3's, Stanford ColBERT's) is
served as that library reads it: the head is read from the loaded model, which translates the legacy layouts
itself (prefix markers as special tokens, query expansion, the punctuation skiplist). Per form it holds the
prompt, the length, the query expansion and the scoring mask's rules (serving/multi_vector.py), which the
tokenizer step applies; the graph is the folder's own modules (Transformer, Dense, Normalize, as the library
runs them) over the tokens, and moves each row's scored vectors to its front, in order, with zero rows after
(a one-hot matmul from the scoring mask's running count: exact, and plain ONNX), plus their count.

Verification holds the served graph, fed by the served tokenizer code, to `encode_query` and `encode_document`
(the same vectors, the same counts) and the MaxSim of query/document pairs to the model's `similarity`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...folder import MULTI_VECTOR_MODEL_TYPES
from ...serving.batching import SCORE_MASK, real_lengths
from ...serving.multi_vector import EXPANSIONS, PARAMETER, Form, forms_to_json
from ...spec import TOKEN_INPUTS, ModelSpec, Options, TensorSpec
from ..task import (FLOAT, SENTENCES, Detector, Ensemble, Exporter, Peer, Task, Tokens, Verifier, library_model,
                   refuse_foreign_flags)
from .contract import COUNTS, DOCUMENT, CONTRACT, QUERY, SIMILARITY_PARAMETER, VECTORS, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

MODULES = ("Transformer", "Dense", "MultiVectorMask", "Normalize")
SIMILARITIES = ("maxsim", "meanmaxsim")
# What encode_document falls back to, in order, for a document's prompt (MultiVectorEncoder.encode_document).
DOCUMENT_PROMPTS = ("document", "passage", "corpus")
# Documents whose punctuation a skiplist leaves unscored, besides the shared sentences.
PUNCTUATED = ["Wait... what?! No, really: it's (mostly) fine.", "a, b; c. d! e? f: g - h / i", "...,,,!!!???"]
# The MaxSim scores verification holds to the library's: each query against every document, to this tolerance
# (a score sums one dot product per query vector).
SCORE_TOLERANCE = 1e-3


@functools.lru_cache(maxsize=1)
def _read(root: str, trust_remote_code: bool) -> Any:
    """The folder as MultiVectorEncoder reads it, once per generation (head, lengths and tokenizer come from it)."""
    from sentence_transformers import MultiVectorEncoder

    try:
        return MultiVectorEncoder(root, device="cpu", trust_remote_code=trust_remote_code)
    except Exception as exc:  # noqa: BLE001 - the library's own words, in one line
        raise TritonizeError(f"sentence-transformers' MultiVectorEncoder could not read {root}: "
                             f"{' '.join(str(exc).split())}") from exc


def _loaded(folder: ModelFolder, options: Options) -> Any:
    return _read(str(folder.root), bool(options.trust_remote_code))


def _prompt(model: Any, form: str) -> str:
    """The prompt encode_query / encode_document prepend where the caller names none."""
    names = (QUERY,) if form == QUERY else DOCUMENT_PROMPTS
    name = next((n for n in names if n in model.prompts), None)
    return model._resolve_prompt(None, name) or ""


def _lengths(model: Any, form: str) -> tuple[int, int]:
    """(where a text of this form is cut, the width floor query expansion pads it to; 0: none), as
    Transformer.preprocess computes them."""
    transformer = model[0]
    own = transformer.query_length if form == QUERY else transformer.document_length
    expansion = transformer.query_expansion if form == QUERY else None
    if expansion is None:
        return int(own or model.max_seq_length), 0
    floor = int(expansion["length"])
    if expansion["strategy"] == "fixed":
        return floor, floor
    return (max(int(own), floor) if own else int(model.max_seq_length)), floor


def _expansion_id(tokenizer: Any, token: str | None) -> int | None:
    """The id the expansion positions hold: the named token, else the mask token, else the end-of-sequence token."""
    if token is not None:
        return tokenizer.convert_tokens_to_ids(token)
    return tokenizer.mask_token_id if tokenizer.mask_token_id is not None else tokenizer.eos_token_id


def _modules(model: Any, root: Any) -> Any:
    """The loaded modules' kinds, refused where they cannot be served exactly; the MultiVectorMask, if any."""
    from sentence_transformers.multi_vector_encoder.modules.token_pooling import BaseTokenPooling

    kinds = [type(m).__name__ for m in model]
    if any(isinstance(m, BaseTokenPooling) for m in model):
        raise TritonizeError(f"{root} pools its token vectors ({' -> '.join(kinds)}), which tritonize does not serve",
                             hint=f"it serves late-interaction models of the modules {', '.join(MODULES)}")
    if kinds[0] != "Transformer" or any(k not in MODULES for k in kinds) or kinds.count("Transformer") != 1:
        raise TritonizeError(f"unsupported MultiVectorEncoder modules {' -> '.join(kinds)} in {root}",
                             hint=f"tritonize serves a Transformer, then any of {', '.join(MODULES[1:])}")
    transformer = model[0]
    modalities = sorted(transformer.modality_config)
    if "message" in modalities:
        raise TritonizeError(f"the MultiVectorEncoder in {root} renders its texts through a chat template",
                             hint="tritonize serves late-interaction models that read plain text")
    if modalities != ["text"] or transformer.transformer_task != "feature-extraction":
        raise TritonizeError(f"the MultiVectorEncoder in {root} reads {', '.join(modalities)} as "
                             f"{transformer.transformer_task!r}", hint="tritonize serves text feature extraction")
    if transformer.tokenizer.padding_side != "right":
        raise TritonizeError(f"the tokenizer of {root} pads on the {transformer.tokenizer.padding_side}",
                             hint="tritonize serves late-interaction models whose tokenizer pads on the right")
    return next((m for m in model if type(m).__name__ == "MultiVectorMask"), None)


def _form(model: Any, mask: Any, name: str, max_length: int, root: Any) -> Form:
    """One form as the loaded model prepares it, cut at the served max length at most."""
    cut, floor = _lengths(model, name)
    expansion = model[0].query_expansion if name == QUERY else None
    fields: dict[str, Any] = {}
    if expansion is not None:
        if expansion["strategy"] not in EXPANSIONS:
            raise TritonizeError(f"{root} expands queries by {expansion['strategy']!r}",
                                 hint=f"tritonize serves the query expansions {', '.join(EXPANSIONS)}")
        if floor > max_length:
            raise TritonizeError(f"{root} expands queries to {floor} tokens, more than the max length {max_length}",
                                 hint=f"use --max-length {floor} or more")
        token_id = _expansion_id(model.tokenizer, expansion["token"])
        if token_id is None:
            raise TritonizeError(f"the tokenizer of {root} has no token for query expansion")
        # Without a MultiVectorMask the scored tokens are the attended ones: expansion positions only with attend.
        fields = {"expansion": expansion["strategy"], "expansion_length": floor, "expansion_id": int(token_id),
                  "attend": bool(expansion["attend"]), "expansion_scored": mask is not None or bool(expansion["attend"])}
    if mask is not None:
        skipped = mask._skiplist_ids
        if skipped is not None and name in mask.skiplist_tasks:
            fields["skip_ids"] = tuple(sorted(int(i) for i in skipped.tolist()))
        if mask.keep_only_token_ids and name != QUERY:
            fields["keep_only_ids"] = tuple(sorted(int(i) for i in mask.keep_only_token_ids))
    return Form(name, min(cut, max_length), _prompt(model, name), **fields)


def _graph_class():
    import torch

    class MultiVectorGraph(torch.nn.Module):
        """The folder's modules over the tokens (MultiVectorMask's work is the scoring mask, made by the tokenizer
        step), then each row's scored vectors moved to its front in order, zero rows after, and their count."""

        def __init__(self, model):
            super().__init__()
            self.stack = torch.nn.ModuleList([m for m in model if type(m).__name__ != "MultiVectorMask"])
            self.model = model[0].auto_model  # the transformers model (export reads its config)

        def forward(self, input_ids, attention_mask, score_mask):
            features = {"input_ids": input_ids, "attention_mask": attention_mask}
            for module in self.stack:
                features = module(features)
            vectors = features["token_embeddings"]  # [N, T, dim]
            scored = score_mask.to(vectors.dtype)  # [N, T]
            slot = torch.cumsum(scored, dim=1) - 1  # where each scored token goes
            positions = torch.arange(vectors.shape[1], device=vectors.device, dtype=vectors.dtype)
            moves = (slot.unsqueeze(2) == positions.view(1, 1, -1)).to(vectors.dtype) * scored.unsqueeze(2)
            return moves.transpose(1, 2) @ vectors, scored.sum(dim=1, keepdim=True).to(torch.int32)

    return MultiVectorGraph


def _library(spec: ModelSpec, **kwargs: Any) -> Any:
    """The folder in MultiVectorEncoder, reading each form at the served lengths."""
    from sentence_transformers import MultiVectorEncoder

    head: Head = spec.head  # type: ignore[assignment]
    model = library_model(MultiVectorEncoder, spec, own_types=MULTI_VECTOR_MODEL_TYPES, **kwargs)
    for form in head.forms:
        cut, _ = _lengths(model, form.name)
        if cut != form.max_length:  # cut shorter by the served max length
            setattr(model[0], f"{form.name}_length", form.max_length)
    return model


def _tokenized(spec: ModelSpec, rows: list[tuple[str, ...]]) -> dict[str, np.ndarray]:
    """(text, form) rows as the served tokenizer step prepares them, padded to the longest."""
    from ...serving.tokenizer import TextEncoder

    encoder = TextEncoder(spec.tokenizer_file, spec.max_length, [spec.max_length], spec.pad_token_id, spec.input_names,
                          forms=spec.head.forms)  # type: ignore[attr-defined]
    return encoder.encode([tuple(r) for r in rows], width=0)


def _encode(model: Any, rows: list[tuple[str, ...]]) -> list[np.ndarray]:
    """Each (text, form) row's vectors as encode_query / encode_document return them, in row order."""
    out: list[np.ndarray | None] = [None] * len(rows)
    for form, encode in ((QUERY, model.encode_query), (DOCUMENT, model.encode_document)):
        picked = [k for k, r in enumerate(rows) if r[1] == form]
        if picked:
            for k, v in zip(picked, encode([rows[k][0] for k in picked], batch_size=len(picked), convert_to_numpy=True)):
                out[k] = np.asarray(v, dtype=np.float32)
    return out  # type: ignore[return-value]


class MultiVectorDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        return bool(folder.late_interaction)

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, (), "a late-interaction model")
        model = _loaded(folder, options)
        mask = _modules(model, folder.root)
        similarity = str(model.similarity_fn_name)
        if similarity not in SIMILARITIES:
            raise TritonizeError(f"unsupported similarity {similarity!r} in {folder.root}",
                                 hint=f"supported: {', '.join(SIMILARITIES)}")
        dim = int(model.get_embedding_dimension() or 0)
        if not dim:
            raise TritonizeError(f"the MultiVectorEncoder in {folder.root} declares no vector width")
        max_length = int(options.max_length or model.max_seq_length)
        forms = tuple(_form(model, mask, name, max_length, folder.root) for name in (QUERY, DOCUMENT))
        return Head(dim, similarity, forms)  # type: ignore[arg-type]

    def describe(self, head: Head) -> str:  # type: ignore[override]
        parts = []
        for form in head.forms:
            words = [f"{form.max_length} tokens"] + ([f"prompt {form.prompt!r}"] if form.prompt else [])
            if form.expansion:
                words.append(f"expanded ({form.expansion}) to {form.expansion_length}"
                             + (", attended" if form.attend else ""))
            words += [f"{len(form.skip_ids)} ids skipped"] if form.skip_ids else []
            parts.append(f"{form.name}: {', '.join(words)}")
        return f"late interaction ({head.similarity}), {head.dim}-value token vectors; {'; '.join(parts)}"


class MultiVectorTokens(Tokens):
    def token_inputs(self, folder: ModelFolder, tokenizer_inputs: tuple[str, ...]) -> tuple[str, ...]:
        """The tokens, and which of them are scored."""
        return TOKEN_INPUTS + (SCORE_MASK,)

    def declared_max_length(self, folder: ModelFolder, options: Options) -> int | None:
        """The widest row the library makes: the longer form's cut, or the query expansion's floor."""
        model = _loaded(folder, options)
        return max(max(_lengths(model, form)) for form in (QUERY, DOCUMENT))

    def served_tokenizer(self, folder: ModelFolder, options: Options) -> Any:
        """The loaded model's tokenizer: the library registers legacy prefix markers ([unused0]) as special tokens."""
        return _loaded(folder, options).tokenizer

    def forms(self, head: Head) -> tuple[Form, ...]:  # type: ignore[override]
        return head.forms


class MultiVectorEnsemble(Ensemble):
    def first_parameters(self, spec: ModelSpec, model_step: str, max_batch_size: int) -> dict[str, str]:
        return {PARAMETER: forms_to_json(self.task.tokens.forms(spec.head))}

    def ensemble_parameters(self, head: Head) -> dict[str, str]:  # type: ignore[override]
        """The similarity, which a client scores with (TextClient.score)."""
        return {SIMILARITY_PARAMETER: head.similarity}

    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(VECTORS, FLOAT, (-1, head.dim)), TensorSpec(COUNTS, "TYPE_INT32", (1,)))


class MultiVectorExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        kwargs = {"model_kwargs": {"attn_implementation": "eager"}} if eager else {}
        return _graph_class()(_library(spec, **kwargs).eval()).eval()


class MultiVectorVerifier(Verifier):
    def verification_rows(self) -> list[tuple[str, ...]]:
        """Every sentence as a query and as a document, and punctuated documents (a skiplist's tokens)."""
        return [(s, QUERY) for s in SENTENCES] + [(s, DOCUMENT) for s in SENTENCES + PUNCTUATED]

    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """encode_query / encode_document, each row's vectors zero-padded to the served rows' width (the graph's
        output, scored vectors first, has one row per token). A row of more vectors than that is cut here, and its
        count is what served_check refuses."""
        head: Head = spec.head  # type: ignore[assignment]
        width = _tokenized(spec, rows)[SCORE_MASK].shape[1]
        found = _encode(_library(spec), rows)
        stacked = np.zeros((len(found), width, head.dim), dtype=np.float32)
        for r, v in enumerate(found):
            stacked[r, : len(v)] = v[:width]
        return "sentence-transformers MultiVectorEncoder", stacked

    def served_check(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]],
                     graph_out: list[np.ndarray]) -> dict:
        """Per row the same vector count as the library (the vectors themselves are the stages' check); and every
        query's MaxSim against every document, by the head, equal to the model's `similarity`."""
        import torch

        head: Head = spec.head  # type: ignore[assignment]
        model = _library(spec)
        expected = _encode(model, rows)
        served = [v[:n] for v, n in zip(graph_out[0], graph_out[1].reshape(-1))]
        worst = max((float(np.abs(s - e).max(initial=0.0)) for s, e in zip(served, expected) if len(s) == len(e)),
                    default=0.0)
        queries = [k for k, r in enumerate(rows) if r[1] == QUERY]
        documents = [k for k, r in enumerate(rows) if r[1] == DOCUMENT]
        library = model.similarity([torch.from_numpy(expected[k]) for k in queries],
                                   [torch.from_numpy(expected[k]) for k in documents]).float().numpy()
        scores = np.stack([head.maxsim(served[q], [served[d] for d in documents]) for q in queries])
        # A score sums one dot product per query vector; each moves by at most 2 * sqrt(dim) * the vectors' own
        # distance from the library's (unit vectors), which the graph's stage check judges.
        longest = max(len(served[q]) for q in queries)
        tolerance = max(SCORE_TOLERANCE, 2 * longest * head.dim ** 0.5 * worst)
        off = np.abs(scores - library).max(axis=1)
        wrong = {q for q, o in zip(queries, off) if o > tolerance}
        agree = sum(len(s) == len(e) and k not in wrong for k, (s, e) in enumerate(zip(served, expected)))
        return {"reference": "sentence-transformers MultiVectorEncoder", "rows": len(rows), "agree": agree,
                "max_abs": worst, "pairs": int(scores.size), "max_score_abs": float(off.max()), "score_tolerance": tolerance,
                "passed": agree == len(rows)}


class MultiVectorPeer(Peer):
    def baseline_rows(self, texts: list[str], lines: bool = False) -> list[tuple[str, ...]]:
        """Each text as a query and as a document."""
        return [(t, form) for t in texts for form in (QUERY, DOCUMENT)]

    def doc_answers(self, spec: ModelSpec, model: Any, tokenizer: Any, rows: list[tuple[str, ...]]) -> tuple[list, int, int]:
        """PyTorch on one batch padded to its longest row, each row prepared as its form (the served tokenizer's
        code: transformers' tokenizer knows no forms), each row's vectors read as the client reads them."""
        import torch

        feeds = _tokenized(spec, rows)
        with torch.inference_mode():
            found, counts = model(*(torch.from_numpy(feeds[n]) for n in spec.input_names))
        answers = CONTRACT.rows({VECTORS: found.numpy(), COUNTS: counts.numpy()})
        return answers, int(real_lengths(feeds).sum()), int(feeds[SCORE_MASK].size)


class MultiVector(Task):
    contract = CONTRACT
    summary = ("TEXT and FORM (query|document) in, `token_vectors` (FP32 [N, T, dim]) and `vector_counts` "
               "(INT32 [N, 1]) out: each text's scored vectors, then zero rows")
    serves = ("late-interaction (ColBERT) folders sentence-transformers' MultiVectorEncoder reads (its own, PyLate's, "
              f"Stanford ColBERT's): {', '.join(MODULES)}")
    Detector = MultiVectorDetector
    Tokens = MultiVectorTokens
    Ensemble = MultiVectorEnsemble
    Exporter = MultiVectorExporter
    Verifier = MultiVectorVerifier
    Peer = MultiVectorPeer


TASK = MultiVector()
