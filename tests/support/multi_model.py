"""A repository of two models: the tiny embedder as written before several models, and a CrossEncoder added
beside it with `generate --add` (the session's `stack`)."""


from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import model_zoo
from tritonize.cli import main
from tritonize.spec import MANIFEST_FILE

RERANK = "rerank"
QUERY = "what does the server do with raw strings?"


def tree(root: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under root, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(root.rglob("*")) if "__pycache__" not in p.parts}


@dataclass(frozen=True)
class Stack:
    repository: Path
    before: dict[str, bytes | None]  # the embedder's repository, before the reranker was added
    embedder: str
    embedder_source: Path
    reranker_source: Path


@pytest.fixture(scope="session")
def stack(tiny_embedding_repo, tmp_path_factory) -> Stack:
    """The tiny embedder's repository, as a release before several models wrote it, and a CrossEncoder added
    beside it with `generate --add`."""
    base = tmp_path_factory.mktemp("stack")
    reranker = model_zoo.build("bert-cross-encoder", base / "zoo")
    repo = base / "retrieval"
    shutil.copytree(tiny_embedding_repo.repository, repo, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = repo / MANIFEST_FILE
    manifest.write_text(manifest.read_text().replace("add: false\n", ""))  # no option of the newer writer
    before = tree(repo)
    assert main(["generate", "--model", str(reranker), "--name", RERANK, "--output", str(repo), "--add"]) == 0
    return Stack(repo, before, tiny_embedding_repo.name, tiny_embedding_repo.source, reranker)
