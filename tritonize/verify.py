"""The exported graph against PyTorch (or sentence-transformers) on real sentences -> report.

The sentences are fixed and varied: short, long, cut at the max length,
non-ASCII. Tolerances: max-abs for fp32 graphs, cosine for fp16 graphs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from .console import step
from .errors import TritonizeError
from .spec import ModelSpec

SENTENCES = [
    "Hello!",
    "Triton serves raw strings.",
    "The quick brown fox jumps over the lazy dog.",
    "A man is eating food.",
    "Machine learning engineers deploy transformer models to production every day.",
    "Ünïcödé: café, naïve, Zürich, São Paulo, Kraków.",
    "日本語のテキストも正しくトークン化されるべきです。",
    "Ein Satz auf Deutsch, um mehrsprachige Eingaben zu prüfen.",
    "Emoji and symbols 🚀✨ — “quotes”, ‘apostrophes’ and ∑ math ≤ ≥.",
    "   leading and trailing whitespace   ",
    "What is the capital of France? Paris is the capital of France.",
    " ".join(["This sentence is repeated to produce a long input that is cut at the maximum length."] * 40),
    " ".join(f"word{i}" for i in range(300)),
    "short",
    "The server keeps serving after bad input, and batching merges requests of the same length.",
    "Dynamic batching, ensembles and Python backends are features of the Triton Inference Server.",
]


def pad_token_id(tokenizer_file: str, fallback: int = 0) -> int:
    """The id the tokenizer pads with (its own padding setting, else a [PAD]/<pad> token)."""
    from tokenizers import Tokenizer

    return _pad_id(Tokenizer.from_file(tokenizer_file), fallback)


def _pad_id(tok, fallback: int = 0) -> int:
    if tok.padding and tok.padding.get("pad_id") is not None:
        return int(tok.padding["pad_id"])
    for token in ("[PAD]", "<pad>", "<PAD>"):
        token_id = tok.token_to_id(token)
        if token_id is not None:
            return int(token_id)
    return fallback


def tokenize(spec: ModelSpec, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Batch-encode with the model's max length, padded to the longest text."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(spec.tokenizer_file)
    pad_id = _pad_id(tok)  # read before the padding setting is dropped below
    tok.no_padding()
    tok.enable_truncation(spec.max_length)
    encodings = tok.encode_batch(texts)
    width = max(len(e.ids) for e in encodings)
    ids = np.full((len(texts), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(texts), width), dtype=np.int64)
    for r, e in enumerate(encodings):
        ids[r, : len(e.ids)] = e.ids
        mask[r, : len(e.ids)] = 1
    return ids, mask


def reference_outputs(spec: ModelSpec, head, texts: list[str], ids: np.ndarray, mask: np.ndarray) -> tuple[str, np.ndarray]:
    """sentence-transformers' own encode for sentence-transformers folders, else the PyTorch head."""
    if spec.task == "embedding" and spec.sentence_transformers_dir:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            pass
        else:
            model = SentenceTransformer(spec.sentence_transformers_dir, device="cpu", trust_remote_code=spec.trust_remote_code)
            model.max_seq_length = spec.max_length  # the same cut as the served tokenizer
            return "sentence-transformers", model.encode(texts, batch_size=len(texts), convert_to_numpy=True)
    import torch

    with torch.no_grad():
        out = head(torch.from_numpy(ids), torch.from_numpy(mask))
    first = out[0] if isinstance(out, tuple) else out
    return "pytorch", first.numpy()


def run_onnx(path: Path, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


def compare(reference: np.ndarray, candidate: np.ndarray) -> dict:
    ref, cand = reference.astype(np.float64), candidate.astype(np.float64)
    cos = (ref * cand).sum(1) / (np.linalg.norm(ref, axis=1) * np.linalg.norm(cand, axis=1) + 1e-12)
    return {
        "max_abs": float(np.abs(ref - cand).max()),
        "mean_abs": float(np.abs(ref - cand).mean()),
        "min_cosine": float(cos.min()),
        "argmax_agreement": float((ref.argmax(1) == cand.argmax(1)).mean()),
    }


def verify(spec: ModelSpec, head, stages: dict[str, Path], fp16_stages: set[str], atol: float, min_cosine: float) -> dict:
    """Compare each ONNX stage with the reference; the report says which check applied and whether it passed."""
    start = time.perf_counter()
    ids, mask = tokenize(spec, SENTENCES)
    with step(f"Verifying {len(stages)} graph(s) on {len(SENTENCES)} sentences"):
        reference_name, reference = reference_outputs(spec, head, SENTENCES, ids, mask)
        results = {}
        for name, path in stages.items():
            metrics = compare(reference, run_onnx(path, ids, mask))
            if name in fp16_stages:
                check = {"metric": "min_cosine", "threshold": min_cosine, "passed": metrics["min_cosine"] >= min_cosine}
            else:
                ok = metrics["max_abs"] <= atol and (spec.task != "classification" or metrics["argmax_agreement"] == 1.0)
                check = {"metric": "max_abs", "threshold": atol, "passed": ok}
            results[name] = {**metrics, **check, "precision": "fp16" if name in fp16_stages else "fp32"}
    lengths = mask.sum(1)
    return {
        "reference": reference_name,
        "task": spec.task,
        "output": spec.output_names[0],
        "sentences": len(SENTENCES),
        "token_lengths": {"min": int(lengths.min()), "max": int(lengths.max()), "max_length": spec.max_length},
        "truncated": int((lengths >= spec.max_length).sum()),
        "stages": results,
        "passed": all(r["passed"] for r in results.values()),
        "seconds": round(time.perf_counter() - start, 3),
    }


def check(report: dict) -> None:
    """Exit non-zero, with the numbers, when a tolerance is exceeded."""
    failed = {name: r for name, r in report["stages"].items() if not r["passed"]}
    if failed:
        detail = "; ".join(
            f"{name}: {r['metric']} {r[r['metric']]:.3g} vs {r['threshold']:.3g}"
            + (f", argmax agreement {r['argmax_agreement']:.2f}" if report["task"] == "classification" else "")
            for name, r in failed.items()
        )
        raise TritonizeError(
            f"verification against {report['reference']} failed ({detail})",
            hint="loosen with --atol / --min-cosine-fp16 if this is expected, or drop --optimize/--precision fp16",
        )
