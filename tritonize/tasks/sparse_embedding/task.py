"""Sparse embeddings (SPLADE): TEXT in, each text's non-zero vocabulary terms out, as `indices` and `values`.

A sentence-transformers SparseEncoder folder (a masked-LM `Transformer(fill-mask)`, or the older
`MLMTransformer`, then `SpladePooling`) is served as it declares it. The graph is the folder's own masked-LM
module followed by SpladePooling's arithmetic with the folder's settings: the logits masked to the real
tokens, log(1 + ReLU) (twice for `log1p_relu`), then max or sum over the tokens; one weight per vocabulary
entry. A served step after the graph (tritonize/tasks/sparse_embedding/served/sparse_embedding.py) keeps each text's non-zero
entries, the `max_active_dims` largest where the folder declares that limit, and returns them compactly.

Verification holds the graph's weights to `SparseEncoder.encode` (max-abs, every vocabulary entry), and the
served answer to encode as the folder declares it: the same non-zero terms, the same values within tolerance.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import TritonizeError
from ...serving.sparse_embedding import INDICES, VALUES, active, compact
from ...serving.sparse_embedding import rows as served_rows
from ...spec import ModelSpec, Options, TensorSpec, TokenizeModelPost
from ..task import FLOAT, Detector, Ensemble, Exporter, Peer, Task, Verifier, library_model, refuse_foreign_flags
from .contract import CONTRACT, Head

if TYPE_CHECKING:
    from ...folder import ModelFolder

WEIGHTS = "term_weights"  # the graph's output: one weight per vocabulary entry, [N, vocab]
POOLINGS: tuple[str, ...] = ("max", "sum")
ACTIVATIONS: tuple[str, ...] = ("relu", "log1p_relu")
MODULES = "a masked-LM Transformer (transformer_task fill-mask, or MLMTransformer), then SpladePooling"
# The served terms' tolerance against encode, at least: values within it agree, and a term both sides hold below
# it (float noise at zero) is reported as borderline rather than as a different non-zero set. A graph further
# from the library (fp16) widens it to its own distance, which the graph's stage check judges.
BORDERLINE = 1e-4


def _graph_class():
    import torch

    class SpladeGraph(torch.nn.Module):
        """The folder's masked-LM module (as sentence-transformers runs it), then SpladePooling's arithmetic."""

        def __init__(self, st_model, pooling: str, activation: str):
            super().__init__()
            self.transformer = st_model[0]
            self.model = self.transformer.auto_model  # the transformers model (export reads its config)
            self.pooling, self.activation = pooling, activation

        def forward(self, input_ids, attention_mask):
            features = self.transformer({"input_ids": input_ids, "attention_mask": attention_mask})
            logits = features[self.transformer.module_output_name]  # [N, tokens, vocab]
            weights = torch.log1p(torch.relu(logits * attention_mask.unsqueeze(-1).to(logits.dtype)))
            if self.activation == "log1p_relu":
                weights = torch.log1p(weights)
            return weights.amax(dim=1) if self.pooling == "max" else weights.sum(dim=1)

    return SpladeGraph


def _sparse_encoder(spec: ModelSpec, **kwargs: Any) -> Any:
    from sentence_transformers import SparseEncoder

    model = library_model(SparseEncoder, spec, **kwargs)
    model.max_seq_length = spec.max_length  # where the served tokenizer cuts texts
    return model


def _encode(model: Any, rows: list[tuple[str, ...]], max_active_dims: int | None) -> np.ndarray:
    """encode as the library answers (prompt="": exactly this text), densified. max_active_dims=None: the
    model's own limit, if it declares one."""
    texts = [r[0] for r in rows]
    out = model.encode(texts, prompt="", batch_size=len(texts), convert_to_tensor=True, convert_to_sparse_tensor=False,
                       max_active_dims=max_active_dims)
    return out.float().cpu().numpy()


class SparseEmbeddingDetector(Detector):
    def detect(self, folder: ModelFolder) -> bool:
        return folder.modules is not None and folder.is_sparse_encoder

    def read_head(self, folder: ModelFolder, options: Options) -> Head:
        refuse_foreign_flags(options, (), "a sparse encoder")
        kinds = folder.module_kinds
        if len(kinds) != 2 or kinds[0] not in ("Transformer", "MLMTransformer") or kinds[1] != "SpladePooling":
            raise TritonizeError(f"unsupported SparseEncoder modules {' -> '.join(kinds)} in {folder.root}",
                                 hint=f"tritonize serves {MODULES}")
        transformer, pooling = (folder.module_dir(m) for m in folder.modules)  # type: ignore[union-attr]
        declared = transformer / "sentence_bert_config.json"
        task = (folder.json(declared) if declared.is_file() else {}).get("transformer_task", "fill-mask")
        if task != "fill-mask" or folder.head_class != "ForMaskedLM":
            raise TritonizeError(
                f"the SparseEncoder in {folder.root} runs {folder.architecture or folder.model_type} as {task!r}",
                hint=f"tritonize serves {MODULES}")
        cfg = folder.json(pooling / "config.json") if (pooling / "config.json").is_file() else {}
        strategy, activation = cfg.get("pooling_strategy", "max"), cfg.get("activation_function", "relu")
        if strategy not in POOLINGS or activation not in ACTIVATIONS:
            raise TritonizeError(f"unsupported SpladePooling {strategy!r} / {activation!r} in {pooling}",
                                 hint=f"supported: pooling {', '.join(POOLINGS)}; activation {', '.join(ACTIVATIONS)}")
        vocab = int(folder.config.get("vocab_size") or 0)
        if not vocab:
            raise TritonizeError(f"config.json in {folder.transformer_dir} declares no vocab_size")
        limit = folder.st_config.get("max_active_dims")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0):
            raise TritonizeError(f"max_active_dims {limit!r} in config_sentence_transformers.json is not a positive integer")
        prompts = tuple(sorted((str(k), str(v)) for k, v in (folder.st_config.get("prompts") or {}).items() if v))
        return Head(strategy, activation, vocab, int(limit or 0), prompts)

    def describe(self, head: Head) -> str:  # type: ignore[override]
        cut = f", at most {head.max_active_dims} terms per text" if head.max_active_dims else ""
        return f"SPLADE {head.pooling} pooling ({head.activation}) over a {head.vocab}-entry vocabulary{cut}"


class SparseEmbeddingEnsemble(Ensemble):
    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(INDICES, "TYPE_INT32", (-1,)), TensorSpec(VALUES, FLOAT, (-1,)))

    def graph_outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(WEIGHTS, FLOAT, (head.vocab,)),)

    def post_parameters(self, spec: ModelSpec) -> dict[str, str]:
        head: Head = spec.head  # type: ignore[assignment]
        return {"weights_input": WEIGHTS, "max_active_dims": str(head.max_active_dims)}


class SparseEmbeddingExporter(Exporter):
    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        head: Head = spec.head  # type: ignore[assignment]
        kwargs = {"model_kwargs": {"attn_implementation": "eager"}} if eager else {}
        return _graph_class()(_sparse_encoder(spec, **kwargs).eval(), head.pooling, head.activation).eval()


class SparseEmbeddingVerifier(Verifier):
    def reference(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]]) -> tuple[str, np.ndarray]:
        """SparseEncoder.encode with no limit on active terms: every weight the graph returns."""
        model = _sparse_encoder(spec)
        model.max_active_dims = None
        return "sentence-transformers SparseEncoder", _encode(model, rows, None)

    def served_check(self, spec: ModelSpec, graph: Any, rows: list[tuple[str, ...]],
                     graph_out: list[np.ndarray]) -> dict:
        """The served answer (the post step on the graph's weights) against SparseEncoder.encode as the folder
        declares it: per text the same non-zero terms and their values within the tolerance (BORDERLINE, or the
        graph's own distance from encode where that is larger); terms both sides hold below it are counted
        apart (float noise at zero), not as a difference."""
        head: Head = spec.head  # type: ignore[assignment]
        model = _sparse_encoder(spec)
        expected = _encode(model, rows, None)
        model.max_active_dims = None
        tolerance = max(BORDERLINE, float(np.abs(graph_out[0] - _encode(model, rows, None)).max()))
        indices, values = compact(graph_out[0], head.max_active_dims)
        agree, borderline, worst, terms = 0, 0, 0.0, []
        for (ids, vals), want in zip(served_rows(indices, values), expected):
            got = np.zeros_like(want)
            got[ids] = vals
            differ = set(ids.tolist()) ^ set(active(want).tolist())
            noise = {i for i in differ if abs(got[i]) <= tolerance and abs(want[i]) <= tolerance}
            borderline += len(noise)
            worst = max(worst, float(np.abs(got - want).max()))
            agree += not (differ - noise) and bool(np.abs(got - want).max() <= tolerance)
            terms.append(len(ids))
        return {"reference": "sentence-transformers SparseEncoder", "rows": len(rows), "agree": agree,
                "passed": agree == len(rows), "max_abs": worst, "tolerance": tolerance, "borderline": borderline,
                "terms": {"min": min(terms), "max": max(terms)}}


class SparseEmbeddingPeer(Peer):
    def doc_answers(self, spec: ModelSpec, model: Any, tokenizer: Any, rows: list[tuple[str, ...]]) -> tuple[list, int, int]:
        """PyTorch on one batch padded to its longest row, each text's weights compacted as the post step does."""
        import torch

        head: Head = spec.head  # type: ignore[assignment]
        batch = tokenizer([r[0] for r in rows], padding=True, truncation=True, max_length=spec.max_length,
                          return_tensors="pt")
        with torch.inference_mode():
            weights = model(batch["input_ids"], batch["attention_mask"]).numpy()
        mask = batch["attention_mask"]
        answers = [{INDICES: ids.tolist(), VALUES: vals.tolist()}
                   for ids, vals in served_rows(*compact(weights, head.max_active_dims))]
        return answers, int(mask.sum()), int(mask.numel())


class SparseEmbedding(Task):
    contract = CONTRACT
    summary = "TEXT in, `indices` (INT32 [N, K]) and `values` (FP32 [N, K]) out: each text's non-zero terms, padded with -1 / 0"
    serves = f"sentence-transformers SparseEncoder folders (SPLADE: {MODULES})"
    pipeline = TokenizeModelPost("sparse_embedding", reads_text=False)  # the step reads the graph's weights alone
    Detector = SparseEmbeddingDetector
    Ensemble = SparseEmbeddingEnsemble
    Exporter = SparseEmbeddingExporter
    Verifier = SparseEmbeddingVerifier
    Peer = SparseEmbeddingPeer


TASK = SparseEmbedding()
