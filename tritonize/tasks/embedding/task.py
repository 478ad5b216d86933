"""Sentence embeddings: TEXT in, one pooled vector per text out.

For a sentence-transformers folder the exported graph is sentence-transformers'
own module stack (Transformer, Pooling of any mode, Dense, Normalize), traced
as the library runs it, and the reference is its own `encode`. A bare encoder
asked for with --task embedding, or a folder whose pooling or normalisation is
overridden by flag, gets tritonize's mean/CLS pooling over the transformers
model instead, verified against that PyTorch model.

Matryoshka: the sizes a model may be cut to (the folder's model card, or
--matryoshka-dims) are recorded in the head; `Head.truncate` cuts served
vectors to one of them as sentence-transformers' `encode(truncate_dim=...)`
does, and verification holds each size to that library. A folder saved with
`truncate_dim` is served at that size, as its `encode` returns it.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...spec import ModelSpec, Options, TensorSpec
from ..task import (FLOAT, Calibrator, DerivedAnswer, Detector, Ensemble, Exporter, Task, Verifier, library_model,
                   load_pretrained, refuse_foreign_flags)
from .contract import CONTRACT, OUTPUT, Head
from .options import OPTIONS, POOLINGS
from .quantization import Calibration, ranges_of

if TYPE_CHECKING:
    from pathlib import Path

    from ...folder import ModelFolder

# sentence-transformers' pooling modes (the boolean keys of its 2.x layout, and the names of later ones).
ST_POOLING_KEYS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}
ST_POOLINGS = tuple(ST_POOLING_KEYS.values())
ST_MODULES = ("Transformer", "Pooling", "Dense", "Normalize")


# What sentence-transformers writes into a model card for a model trained with MatryoshkaLoss: the loss's
# parameters as JSON, `"matryoshka_dims": [768, 512, ...]`.
CARD_FILE = "README.md"
CARD_DIMS = re.compile(r'"matryoshka_dims"\s*:\s*(\[[\d\s,]*\])')


def card_dimensions(folder: ModelFolder) -> tuple[int, ...]:
    """The Matryoshka sizes the folder's model card declares (every MatryoshkaLoss it lists), or ()."""
    card = folder.root / CARD_FILE
    if not card.is_file():
        return ()
    text = card.read_text(encoding="utf-8", errors="replace")
    return tuple(sorted({int(d) for found in CARD_DIMS.findall(text) for d in json.loads(found)}, reverse=True))


def _graph_class():
    import torch
    import torch.nn.functional as F  # noqa: N812

    class EmbeddingGraph(torch.nn.Module):
        """encoder -> pooling (mean over the attention mask, or CLS) -> optional L2 normalisation."""

        def __init__(self, model, pooling: str, normalize: bool):
            super().__init__()
            self.model, self.pooling, self.normalize = model, pooling, normalize

        def forward(self, input_ids, attention_mask):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask)[0]
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:  # the same arithmetic as sentence-transformers' Pooling(mean)
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / torch.clamp(mask.sum(1), min=1e-9)
            return F.normalize(pooled, p=2, dim=1) if self.normalize else pooled

    class SentenceTransformerGraph(torch.nn.Module):
        """sentence-transformers' own module stack, called as its encode() calls it (cut to the folder's
        truncate_dim, as encode cuts it)."""

        def __init__(self, st_model, truncate_dim: int):
            super().__init__()
            self.st, self.truncate_dim = st_model, truncate_dim
            self.model = st_model[0].auto_model  # the transformers model (export reads its config)

        def forward(self, input_ids, attention_mask):
            embedding = self.st({"input_ids": input_ids, "attention_mask": attention_mask})["sentence_embedding"]
            return embedding[:, : self.truncate_dim] if self.truncate_dim else embedding

    return EmbeddingGraph, SentenceTransformerGraph


def _pooling_modes(cfg: dict, where: Any) -> tuple[str, ...]:
    """The modes a Pooling config declares: the newer `pooling_mode` (a name or a list), or the 2.x booleans."""
    declared = cfg.get("pooling_mode")
    if declared is None:
        modes = tuple(mode for key, mode in ST_POOLING_KEYS.items() if cfg.get(key))
        modes = modes or ("mean",)
    else:
        modes = (declared,) if isinstance(declared, str) else tuple(declared)
    unknown = [m for m in modes if m not in ST_POOLINGS]
    if unknown:
        raise TritonizeError(f"unsupported sentence-transformers pooling {unknown} in {where}", hint=f"supported: {', '.join(ST_POOLINGS)}")
    return modes


class EmbeddingDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        return (folder.modules is not None and not folder.is_cross_encoder and not folder.is_sparse_encoder
                and not folder.late_interaction and not folder.image_text)

    def accepts(self, folder: ModelFolder) -> bool:
        """Its own folders, and a bare encoder; never a late-interaction model (one vector per token)."""
        return self.detect(folder) or (folder.modules is None and folder.head_class == "" and not folder.late_interaction
                                       and not folder.image_text)

    def _declared(self, folder: ModelFolder) -> tuple[tuple[str, ...], bool, int, int]:
        """(pooling modes, normalize, dim, Dense count) from the sentence-transformers modules."""
        modes: tuple[str, ...] = ("mean",)
        normalize, dense = False, 0
        dim = folder.hidden_size
        for module in folder.modules or ():
            kind, sub = folder.module_kind(module), folder.module_dir(module)
            cfg = folder.json(sub / "config.json") if kind != "Transformer" and (sub / "config.json").is_file() else {}
            if kind not in ST_MODULES:
                raise TritonizeError(
                    f"unsupported sentence-transformers module {kind!r} in {folder.root}",
                    hint=f"supported modules: {', '.join(ST_MODULES)}",
                )
            if kind == "Pooling":
                modes = _pooling_modes(cfg, sub)
                if cfg.get("include_prompt") is False:
                    raise TritonizeError(
                        f"{sub} pools without the prompt's tokens (include_prompt: false)",
                        hint="the server cannot tell where a prompt ends; tritonize serves pooling over every token",
                    )
                dim = int(cfg.get("embedding_dimension") or cfg.get("word_embedding_dimension") or dim) * len(modes)
            elif kind == "Dense":
                dense += 1
                dim = int(cfg.get("out_features") or 0)
                if not dim:
                    raise TritonizeError(f"the Dense module in {sub} declares no out_features", hint="save it with sentence-transformers")
            elif kind == "Normalize":
                normalize = True
        return modes, normalize, dim, dense

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, self.task.own_options, "an embedding model")
        modes, normalize, dim, dense = self._declared(folder)
        if not dim:
            raise TritonizeError(f"config.json in {folder.transformer_dir} declares no hidden_size")
        if options.pooling is not None and options.pooling not in POOLINGS:
            raise TritonizeError(f"unknown pooling {options.pooling!r}", hint=f"use one of: {', '.join(POOLINGS)}")
        pooling = "+".join(modes)
        overridden = (options.pooling not in (None, pooling)) or (options.normalize not in (None, normalize))
        prompts = tuple(sorted((str(k), str(v)) for k, v in (folder.st_config.get("prompts") or {}).items() if v))
        if folder.modules is not None and not overridden:
            truncate_dim = int(folder.st_config.get("truncate_dim") or 0)
            truncate_dim = truncate_dim if 0 < truncate_dim < dim else 0  # encode cuts [:truncate_dim]
            served = truncate_dim or dim
            dimensions = _dimensions(folder, options, served, truncate_dim)
            return self.task.head_type(pooling, normalize, served, "sentence-transformers", dense, prompts, truncate_dim,
                                       dimensions)
        if options.matryoshka_dims:
            raise TritonizeError(
                "--matryoshka-dims needs the folder's own sentence-transformers modules "
                "(each size is verified against its encode(truncate_dim=...))",
                hint="serve a sentence-transformers folder as it is, without --pooling/--normalize",
            )
        if dense:
            raise TritonizeError(
                f"--pooling/--normalize cannot be combined with the Dense module(s) of {folder.root}",
                hint="serve the folder as it is, without those flags",
            )
        pooling = options.pooling or pooling
        if pooling not in POOLINGS:
            raise TritonizeError(f"--normalize over {pooling} pooling needs the folder's own modules", hint="drop the flag")
        normalize = normalize if options.normalize is None else options.normalize
        return self.task.head_type(pooling, normalize, folder.hidden_size, "transformers", 0, prompts)

    def describe(self, head: Head) -> str:  # type: ignore[override]
        parts = [f"{head.pooling} pooling"] + ([f"{head.dense} Dense"] if head.dense else [])
        parts += ["normalised"] if head.normalize else []
        parts += [f"cut to {head.truncate_dim} (truncate_dim)"] if head.truncate_dim else []
        return ", ".join(parts + ([f"Matryoshka {'/'.join(map(str, head.dimensions))}"] if head.dimensions else []))


class EmbeddingEnsemble(Ensemble):
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, FLOAT, (head.dim,)),)


class EmbeddingExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        head: Head = spec.head  # type: ignore[assignment]
        pooled, own = _graph_class()
        if head.library == "sentence-transformers":
            from sentence_transformers import SentenceTransformer

            kwargs = {"attn_implementation": "eager"} if eager else {}
            st = library_model(SentenceTransformer, spec, model_kwargs=kwargs)
            return own(st.eval(), head.truncate_dim).eval()
        # The pooler of a bare encoder is never used: its weights may be missing.
        model = load_pretrained(bare_class(spec.architecture), spec, eager, allow_missing=("pooler.",))
        return pooled(model, head.pooling, head.normalize).eval()


class EmbeddingVerifier(Verifier):
    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """sentence-transformers' own encode for its folders, else the pooled PyTorch model."""
        head: Head = spec.head  # type: ignore[assignment]
        if head.library == "sentence-transformers":
            return "sentence-transformers", _encode(_sentence_transformer(spec), rows)
        return super().reference(spec, graph, rows)

    def derived_answers(self, spec: ModelSpec, rows: list[tuple[str, ...]]) -> tuple[DerivedAnswer, ...]:
        """Each declared Matryoshka size: the served vectors cut by `Head.truncate` against
        SentenceTransformer.encode(truncate_dim=d, normalize_embeddings=<as the model normalises>)."""
        head: Head = spec.head  # type: ignore[assignment]
        if not head.dimensions:
            return ()
        model = _sentence_transformer(spec)
        return tuple(
            DerivedAnswer(f"dim {d}", _encode(model, rows, truncate_dim=d, normalize_embeddings=head.normalize),
                    lambda out, d=d: head.truncate(out, d))
            for d in head.dimensions
        )


class EmbeddingCalibrator(Calibrator):
    int8_figure = "top-10 retrieval overlap"
    calibrates = True

    def calibration(self, spec: ModelSpec, served: np.ndarray, source: str, graph: Path) -> dict:
        """The per-dimension ranges int8/uint8 quantize with: of the served vectors, and of the vectors cut by
        `Head.truncate` to each declared Matryoshka size."""
        head: Head = spec.head  # type: ignore[assignment]
        sizes = {d: head.truncate(served, d) for d in head.dimensions if d != head.dim}
        ranges = {d: ranges_of(v) for d, v in {head.dim: served, **sizes}.items()}
        return Calibration(source, len(served), ranges).to_dict()

    def int8_kept(self, fp32: np.ndarray, int8: np.ndarray) -> float:
        """Every 4th corpus text as a query against the rest: the mean share of its 10 nearest neighbours by
        cosine under fp32 that int8 finds too."""
        return retrieval_overlap(fp32, int8, k=10, every=4)


class Embedding(Task):
    own_options = OPTIONS
    contract = CONTRACT
    summary = "TEXT in, `embedding` (FP32 [N, dim]) out"
    serves = "sentence-transformers folders (Transformer, Pooling, Dense, Normalize), or a bare encoder with --task embedding"
    Detector = EmbeddingDetector
    Ensemble = EmbeddingEnsemble
    Exporter = EmbeddingExporter
    Verifier = EmbeddingVerifier
    Calibrator = EmbeddingCalibrator


def _dimensions(folder: ModelFolder, options: Options, served: int, truncate_dim: int) -> tuple[int, ...]:
    """The Matryoshka sizes a request may ask for: --matryoshka-dims, else the model card's, with the served
    size among them; () where neither declares any. The flag's sizes must fit what is served; the card's that do
    not (a folder cut shorter by truncate_dim) are dropped."""
    if options.matryoshka_dims:
        asked = {int(d) for d in options.matryoshka_dims}
        wrong = sorted(d for d in asked if not 0 < d <= served)
        if wrong:
            cut = f" (truncate_dim {truncate_dim} in config_sentence_transformers.json)" if truncate_dim else ""
            raise TritonizeError(
                f"--matryoshka-dims {','.join(map(str, wrong))}: this model serves {served}-value embeddings{cut}",
                hint=f"give sizes from 1 to {served}",
            )
    else:
        asked = {d for d in card_dimensions(folder) if d <= served}
    return tuple(sorted(asked | {served}, reverse=True)) if asked else ()


def _sentence_transformer(spec: ModelSpec) -> Any:
    """The folder in sentence-transformers, cutting texts where the served tokenizer cuts them."""
    from sentence_transformers import SentenceTransformer

    model = library_model(SentenceTransformer, spec)
    model.max_seq_length = spec.max_length
    return model


def _encode(model: Any, rows: list[tuple[str, ...]], **kwargs: Any) -> np.ndarray:
    # prompt="": the embedding of exactly this text; declared prompts are the client's to prepend.
    texts = [r[0] for r in rows]
    return model.encode(texts, prompt="", batch_size=len(texts), convert_to_numpy=True, **kwargs)


def bare_class(architecture: str) -> Any:
    """The folder's own bare model class where it names one (T5EncoderModel: T5's encoder alone), else AutoModel."""
    import transformers

    named = getattr(transformers, architecture, None) if architecture.endswith("Model") else None
    return named if named is not None and hasattr(named, "from_pretrained") else transformers.AutoModel


def retrieval_overlap(reference: np.ndarray, candidate: np.ndarray, k: int, every: int) -> float:
    def neighbours(vectors: np.ndarray) -> np.ndarray:
        unit = vectors / (np.linalg.norm(vectors, axis=1, keepdims=True) + 1e-12)
        queries = np.arange(0, len(unit), every)
        sims = unit[queries] @ unit.T
        sims[np.arange(len(queries)), queries] = -np.inf  # not the query itself
        return np.argsort(-sims, axis=1)[:, :k]

    found = zip(neighbours(reference), neighbours(candidate))
    return float(np.mean([len(set(a) & set(b)) / k for a, b in found]))


TASK = Embedding()
