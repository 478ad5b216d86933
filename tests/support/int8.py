"""Session fixtures of the int8 tests: the source folders (one with outlier weights, so int8 loses accuracy) and
an int8 repository of the embedder."""


from __future__ import annotations

from pathlib import Path

import pytest

from tritonize.cli import main


@pytest.fixture(scope="session")
def sources(tmp_path_factory) -> dict[str, Path]:
    from support.model_zoo import build_token_classifier
    from support.tiny_models import build_classifier, build_embedding_model

    root = tmp_path_factory.mktemp("int8-src")
    return {"emb": build_embedding_model(root / "emb"), "cls": build_classifier(root / "cls"),
            "ner": build_token_classifier(root / "ner", "bert"),
            # int8 error large by construction (an outlier weight per channel): about cosine 0.99, overlap 0.5
            "lossy": build_embedding_model(root / "lossy", outliers=200.0)}


@pytest.fixture(scope="session")
def int8_repo(sources, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("int8") / "repo"
    assert main(["generate", "--model", str(sources["emb"]), "--name", "emb8", "--output", str(out), "--precision", "int8"]) == 0
    return out
