"""A second model to serve as a new version, the in-process floor of the texts each version answers, and a
fresh copy of the tiny repository to switch."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tritonize.chain import in_process

TEXTS = ["a new version of the model", "zero downtime", "the quick brown fox jumps over the lazy dog"]


def floor(repo: Path) -> np.ndarray:
    chain = in_process(repo)
    return np.concatenate([chain([(t,)]).outputs["embedding"] for t in TEXTS])


@pytest.fixture(scope="session")
def second_model(tmp_path_factory) -> Path:
    from support.tiny_models import build_embedding_model

    return build_embedding_model(tmp_path_factory.mktemp("v2") / "src", seed=1)


def copy_of(tiny_embedding_repo, tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(tiny_embedding_repo.repository, repo, ignore=shutil.ignore_patterns("__pycache__"))
    return repo
