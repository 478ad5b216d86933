"""Late-interaction (ColBERT) folders beyond model_zoo's three layouts, and the library's answers to hold them to.

`build_variant` saves, with MultiVectorEncoder.save, the sentence-transformers layout with what a ColBERT model may
declare: query expansion (fixed or min, attended or not), a skiplist (on documents or on both forms), prompts,
per-form lengths and the similarity. Both the unit tests (tokenizer, verification) and the e2e tests use them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support import model_zoo

# Texts both forms are served: punctuation (a skiplist's tokens), non-ASCII, a query longer than its expansion
# floor, a long document cut at the max length.
TEXTS = [
    "What is the capital of France?",
    "Paris is the capital of France.",
    "Wait... what?! No, really: it's (mostly) fine.",
    "Ünïcödé café, naïve — 日本語 🚀",
    "a",
    " ".join(f"word{i}" for i in range(40)),
    " ".join(["A long document that is cut at the maximum length."] * 30),
]

# name -> what the variant declares (build_variant's keywords)
VARIANTS = {
    "fixed-skiplist": {"expansion": {"strategy": "fixed", "length": 16}, "skiplist": ["!", ",", ".", "?"]},
    "min-attend": {"expansion": {"strategy": "min", "length": 24, "attend": True}, "skiplist": [], "query_length": 40,
                   "document_length": 64, "prompts": {"query": "query: ", "document": "passage: "}},
    "skip-both-meanmaxsim": {"skiplist": ["!", ",", ".", "?", ":"], "skiplist_tasks": ["query", "document"],
                             "similarity": "meanmaxsim"},
}


def build_variant(folder: Path, expansion: dict | None = None, skiplist: list[str] | None = None,
                  skiplist_tasks: list[str] | None = None, query_length: int | None = None,
                  document_length: int | None = None, prompts: dict | None = None,
                  similarity: str | None = None) -> Path:
    """model_zoo's sentence-transformers layout, declaring what the keywords say, saved by MultiVectorEncoder."""
    from sentence_transformers import MultiVectorEncoder
    from sentence_transformers.multi_vector_encoder.modules import MultiVectorMask

    base = model_zoo.build_multi_vector(Path(folder).with_name(Path(folder).name + "-base"), "sentence-transformers")
    modules = list(MultiVectorEncoder(str(base), device="cpu"))  # Transformer, Dense, Normalize
    transformer = modules[0]
    transformer.query_length, transformer.document_length = query_length, document_length
    transformer.query_expansion = expansion
    if skiplist is not None:
        modules.insert(2, MultiVectorMask(skiplist_words=skiplist, skiplist_tasks=skiplist_tasks))
    MultiVectorEncoder(modules=modules, device="cpu", prompts=prompts, similarity_fn_name=similarity).save(str(folder))
    return Path(folder)


MARKERS = ("[unused0]", "[unused1]")  # PyLate's and Stanford ColBERT's query and document markers


def with_markers(folder: Path) -> Path:
    """The folder's tokenizer with BERT's [unused0] and [unused1] as plain vocabulary entries (its last two,
    renamed), as a real BERT vocabulary has them: the library registers them as special tokens, so a marker
    stays one token instead of '[', 'unused', '0', ']'."""
    import json

    path = Path(folder) / "tokenizer.json"
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    last = sorted(vocab, key=vocab.get)[-len(MARKERS):]
    for old, new in zip(last, MARKERS):
        vocab[new] = vocab.pop(old)
    path.write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")
    return Path(folder)


def library(folder: Path, max_length: int | None = None):
    """The folder in MultiVectorEncoder; with `max_length`, each form's length cut there as the served one is
    (PyLate's and Stanford's 180-token documents, on a tiny encoder of 128 positions)."""
    from sentence_transformers import MultiVectorEncoder

    model = MultiVectorEncoder(str(folder), device="cpu")
    for form in ("query", "document"):
        if max_length and (getattr(model[0], f"{form}_length") or 0) > max_length:
            setattr(model[0], f"{form}_length", max_length)
    return model


def encode(model, texts: list[str], form: str) -> list[np.ndarray]:
    """encode_query or encode_document, as numpy arrays."""
    encode = model.encode_query if form == "query" else model.encode_document
    return [np.asarray(v, dtype=np.float32) for v in encode(texts, convert_to_numpy=True)]


def assert_same_vectors(served: list[np.ndarray], expected: list[np.ndarray], atol: float = 1e-4) -> None:
    """Per text the same number of vectors, each within atol."""
    assert [len(v) for v in served] == [len(v) for v in expected]
    for got, want in zip(served, expected):
        assert got.dtype == np.float32 and got.shape == want.shape
        assert np.abs(got - want).max(initial=0.0) <= atol
