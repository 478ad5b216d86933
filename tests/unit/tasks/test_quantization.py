"""Quantized embeddings (tasks/embedding/quantization.py) against sentence-transformers' own quantize_embeddings,
bit for bit, and the ranges generation records beside each version's graph."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer
from sentence_transformers.util import quantize_embeddings

from support import REPO_ROOT
from support.cli import run_generate
from support.tiny_models import build_classifier, build_embedding_model
from tritonize.generate import generate
from tritonize.manifest import read_manifest
from tritonize.spec import QUANTIZATION_FILE, repo_paths
from tritonize.spec.options import GenerateOptions
from tritonize.tasks.embedding import truncate_embeddings
from tritonize.tasks.embedding.quantization import PRECISIONS, RANGED, Calibration, quantize, ranges_of
from tritonize.tasks.task import SENTENCES

CORPUS = [f"Calibration text number {i}: triton serves raw strings, batched." for i in range(40)]
QUERIES = ["A fox.", "Ünïcödé café", "What does the server do?", "short", "word " * 50]


def assert_same(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    assert ours.tobytes() == theirs.tobytes()


def random_sets(seed: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """A calibration set and a set to quantize whose values fall outside its ranges too (wider spread)."""
    rng = np.random.default_rng(seed)
    calibration = rng.normal(0, 0.1, (200, dim)).astype(np.float32)
    vectors = rng.normal(0, 0.3, (64, dim)).astype(np.float32)
    vectors[0] = calibration.min(0) - 1  # below every range: the first bucket
    vectors[1] = calibration.max(0) + 1  # above every range: the last bucket
    vectors[2] = calibration[5]  # exactly on the calibration values
    return calibration, vectors


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("dim", [32, 13, 384])
def test_random_embeddings_quantize_as_the_library_does(precision: str, dim: int) -> None:
    calibration, vectors = random_sets(dim, dim)
    ranges = ranges_of(calibration)
    expected = quantize_embeddings(vectors, precision, ranges=ranges)
    assert_same(quantize(vectors, precision, ranges), expected)
    if precision in RANGED:  # the library's own ranges from the calibration set are ours
        assert_same(quantize(vectors, precision, ranges),
                    quantize_embeddings(vectors, precision, calibration_embeddings=calibration))
        q = quantize(vectors, precision, ranges)
        assert q[0].tolist() == [q.dtype.type(0 if precision == "uint8" else -128)] * dim  # clipped low
        assert q[1].tolist() == [q.dtype.type(255 if precision == "uint8" else 127)] * dim  # clipped high


@pytest.mark.parametrize("precision", RANGED)
def test_a_dimension_of_one_value_quantizes_as_the_library_does(precision: str) -> None:
    """A range of zero width: the library's step of 1 instead of a division by zero."""
    calibration, vectors = random_sets(3, 16)
    calibration[:, 4] = 0.25
    ranges = ranges_of(calibration)
    assert ranges[0, 4] == ranges[1, 4]
    assert_same(quantize(vectors, precision, ranges), quantize_embeddings(vectors, precision, ranges=ranges))


def test_int8_needs_ranges_and_unknown_precisions_are_refused() -> None:
    vectors = np.ones((2, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="needs per-dimension ranges"):
        quantize(vectors, "int8")
    with pytest.raises(ValueError, match="int4"):
        quantize(vectors, "int4")


@pytest.fixture(scope="module")
def embedder(tmp_path_factory) -> tuple[Path, SentenceTransformer]:
    folder = build_embedding_model(tmp_path_factory.mktemp("quant") / "emb")
    return folder, SentenceTransformer(str(folder), device="cpu")


@pytest.mark.parametrize("dim", [32, 16, 8])
@pytest.mark.parametrize("precision", PRECISIONS)
def test_real_embeddings_and_matryoshka_cuts_quantize_as_the_library_does(embedder, precision: str, dim: int) -> None:
    """Embeddings of a real model, cut and re-normalised to a Matryoshka size, with ranges of that size's
    own calibration embeddings: texts outside the calibration corpus included."""
    _, model = embedder
    calibration = model.encode(CORPUS, truncate_dim=dim, normalize_embeddings=True, convert_to_numpy=True)
    vectors = model.encode(QUERIES + SENTENCES, truncate_dim=dim, normalize_embeddings=True, convert_to_numpy=True)
    full = model.encode(QUERIES + SENTENCES, convert_to_numpy=True)
    assert np.abs(truncate_embeddings(full, dim, True) - vectors).max() < 1e-6  # the served cut is the library's
    ranges = ranges_of(calibration)
    assert_same(quantize(vectors, precision, ranges), quantize_embeddings(vectors, precision, ranges=ranges))


def test_recorded_ranges_read_back_bit_for_bit() -> None:
    calibration, _ = random_sets(7, 24)
    recorded = Calibration("corpus.txt", 200, {24: ranges_of(calibration), 8: ranges_of(calibration[:, :8])})
    back = Calibration.from_dict(json.loads(json.dumps(recorded.to_dict())))
    assert back.source == "corpus.txt" and back.texts == 200 and set(back.ranges) == {24, 8}
    for dim, ranges in recorded.ranges.items():
        assert_same(back.of_size(dim), ranges)
    assert back.label(24).startswith("dim=24; source=corpus.txt; texts=200; sha256=")
    assert back.label(24) != back.label(8)


def recorded(repository: Path, name: str) -> Calibration:
    version = read_manifest(repository, name).version
    found = Calibration.read(repo_paths(repository, name)["model"] / str(version) / QUANTIZATION_FILE)
    assert found is not None
    return found


def test_generation_records_the_served_graphs_ranges_at_each_matryoshka_size(embedder, tmp_path: Path) -> None:
    """Of the verification corpus by default: each size's ranges are those of sentence-transformers' embeddings
    at that size (the graph agrees with it within the verified tolerance), and quantizing the library's
    embeddings with them is quantize_embeddings' answer."""
    folder, model = embedder
    repo = generate(GenerateOptions(model=str(folder), name="emb", output=str(tmp_path / "repo"),
                                    matryoshka_dims=[32, 16, 8]))
    calibration = recorded(repo, "emb")
    assert calibration.source == "verification corpus" and calibration.texts == len(SENTENCES)
    assert sorted(calibration.ranges) == [8, 16, 32]
    for dim in (32, 16, 8):
        expected = model.encode(SENTENCES, prompt="", truncate_dim=dim, normalize_embeddings=True,
                                convert_to_numpy=True)
        ranges = calibration.of_size(dim)
        assert ranges.shape == (2, dim) and ranges.dtype == np.float32
        assert np.abs(ranges - ranges_of(expected)).max() < 1e-4
        vectors = model.encode(QUERIES, truncate_dim=dim, normalize_embeddings=True, convert_to_numpy=True)
        for precision in RANGED:
            assert_same(quantize(vectors, precision, ranges), quantize_embeddings(vectors, precision, ranges=ranges))


def test_generation_records_the_ranges_of_a_calibration_file(embedder, tmp_path: Path) -> None:
    folder, model = embedder
    texts = tmp_path / "corpus.txt"
    texts.write_text("\n".join(CORPUS[:20]) + "\n\n   \n" + "\n".join(CORPUS[20:]) + "\n", encoding="utf-8")
    repo = generate(GenerateOptions(model=str(folder), name="emb", output=str(tmp_path / "repo"),
                                    calibration=str(texts)))
    calibration = recorded(repo, "emb")
    assert calibration.source == "corpus.txt" and calibration.texts == len(CORPUS)  # blank lines are no texts
    assert sorted(calibration.ranges) == [32]
    expected = ranges_of(model.encode(CORPUS, prompt="", convert_to_numpy=True))
    assert np.abs(calibration.of_size(32) - expected).max() < 1e-4
    assert np.abs(calibration.of_size(32) - ranges_of(model.encode(SENTENCES, convert_to_numpy=True))).max() > 1e-3
    assert read_manifest(repo).options.calibration == str(texts)  # regenerating reads the same file


@pytest.mark.parametrize("content, expected", [
    (None, "--calibration {path}: cannot be read as UTF-8 text (FileNotFoundError"),
    (b"\xff\xfe\x00bad", "--calibration {path}: cannot be read as UTF-8 text (UnicodeDecodeError"),
    (b"only one text\n\n", "--calibration {path} holds 1 non-blank line(s): ranges need at least two texts"),
])
def test_a_bad_calibration_file_is_refused_in_one_line(embedder, tmp_path: Path, content, expected: str) -> None:
    folder, _ = embedder
    path = tmp_path / "texts.txt"
    if content is not None:
        path.write_bytes(content)
    result = run_generate("--model", str(folder), "--output", str(tmp_path / "repo"), "--calibration", str(path))
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and expected.format(path=path) in errors[0], result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "repo").exists()


def test_calibration_is_refused_for_a_model_that_is_not_an_embedder(tmp_path: Path) -> None:
    folder = build_classifier(tmp_path / "cls")
    (tmp_path / "texts.txt").write_text("a\nb\n")
    result = run_generate("--model", str(folder), "--output", str(tmp_path / "repo"),
                          "--calibration", str(tmp_path / "texts.txt"))
    assert result.returncode == 2 and "error: --calibration does not apply to a classifier" in result.stderr


def test_the_api_quantizes_without_a_model_library() -> None:
    """The quantization and the routes that use it load neither torch nor sentence-transformers."""
    probe = ("import sys, tritonize.tasks.embedding.quantization, tritonize.api.app; "
             "print(sorted({'torch', 'transformers', 'sentence_transformers'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
