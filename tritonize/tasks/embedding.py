"""Sentence embeddings: TEXT in, one pooled (optionally L2-normalised) vector per text out.

Pooling and normalisation go inside the graph, so every runtime computes
exactly the served output. Reference: sentence-transformers' own `encode`
for sentence-transformers folders, else the pooled PyTorch model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np

from ..errors import TritonizeError
from ..spec import GenerateOptions, ModelSpec, TensorSpec
from ..spec import Head as BaseHead
from .base import FLOAT, Task, load_pretrained

if TYPE_CHECKING:
    from ..source import ModelFolder

Pooling = Literal["mean", "cls"]
POOLINGS: tuple[str, ...] = ("mean", "cls")
OUTPUT = "embedding"
# sentence-transformers' boolean Pooling keys that tritonize exports.
ST_POOLING_MODES = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


@dataclass(frozen=True)
class Head(BaseHead):
    task: ClassVar[str] = "embedding"
    pooling: Pooling
    normalize: bool
    dim: int


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

    return EmbeddingGraph


class Embedding(Task):
    name = "embedding"
    summary = "TEXT in, `embedding` (FP32 [N, dim]) out"
    head_type = Head
    output_names = (OUTPUT,)

    def detect(self, folder: ModelFolder) -> bool:
        return folder.modules is not None

    def _declared(self, folder: ModelFolder) -> tuple[str, bool]:
        """(pooling, normalize) from the sentence-transformers modules; mean and none without them."""
        pooling, normalize = "mean", False
        for module in folder.modules or ():
            kind, sub = folder.module_kind(module), folder.module_dir(module)
            if kind == "Transformer":
                continue
            if kind == "Pooling":
                cfg = folder.json(sub / "config.json") if (sub / "config.json").is_file() else {}
                modes = [mode for key, mode in ST_POOLING_MODES.items() if cfg.get(key)]
                others = [k for k, v in cfg.items() if k.startswith("pooling_mode") and v and k not in ST_POOLING_MODES]
                if others or len(modes) != 1:
                    raise TritonizeError(
                        f"unsupported sentence-transformers pooling {others or modes} in {sub}",
                        hint="tritonize exports mean or CLS pooling",
                    )
                pooling = modes[0]
            elif kind == "Normalize":
                normalize = True
            else:
                raise TritonizeError(
                    f"unsupported sentence-transformers module {kind!r} in {folder.root}",
                    hint="supported modules: Transformer, Pooling (mean/CLS), Normalize",
                )
        return pooling, normalize

    def read_head(self, folder: ModelFolder, options: GenerateOptions) -> Head:
        pooling, normalize = self._declared(folder)
        dim = int(folder.config.get("hidden_size") or folder.config.get("dim") or 0)
        if not dim:
            raise TritonizeError(f"config.json in {folder.transformer_dir} declares no hidden_size")
        if options.pooling is not None and options.pooling not in POOLINGS:
            raise TritonizeError(f"unknown pooling {options.pooling!r}", hint=f"use one of: {', '.join(POOLINGS)}")
        return Head(
            pooling=options.pooling or pooling,  # type: ignore[arg-type]
            normalize=normalize if options.normalize is None else options.normalize,
            dim=dim,
        )

    def describe(self, head: Head) -> str:  # type: ignore[override]
        return f"{head.pooling} pooling" + (", normalised" if head.normalize else "")

    def outputs(self, head: Head) -> tuple[TensorSpec, ...]:  # type: ignore[override]
        return (TensorSpec(OUTPUT, FLOAT, (head.dim,)),)

    def load(self, spec: ModelSpec, eager: bool = True) -> Any:
        from transformers import AutoModel

        head: Head = spec.head  # type: ignore[assignment]
        model = load_pretrained(AutoModel, spec, eager)
        return _graph_class()(model, head.pooling, head.normalize).eval()

    def reference(self, spec: ModelSpec, graph: Any, texts: list[str], feeds: dict[str, np.ndarray]) -> tuple[str, np.ndarray]:
        """sentence-transformers' own encode for its folders, else the pooled PyTorch model."""
        if spec.sentence_transformers_dir:
            try:
                from sentence_transformers import SentenceTransformer
            except ImportError:
                pass
            else:
                model = SentenceTransformer(spec.sentence_transformers_dir, device="cpu", trust_remote_code=spec.trust_remote_code)
                model.max_seq_length = spec.max_length  # the same cut as the served tokenizer
                return "sentence-transformers", model.encode(texts, batch_size=len(texts), convert_to_numpy=True)
        return super().reference(spec, graph, texts, feeds)

    def rows(self, outputs: dict[str, np.ndarray]) -> list[dict]:
        return [{OUTPUT: np.asarray(v, dtype=np.float32).tolist()} for v in outputs[OUTPUT]]

    def summary_line(self, row: dict) -> str:
        vec = np.asarray(row[OUTPUT])
        head = ", ".join(f"{v:+.4f}" for v in vec[:4])
        return f"dim {vec.size}  norm {np.linalg.norm(vec):.3f}  [{head}, ...]"


TASK = Embedding()
