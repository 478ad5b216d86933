"""A shadow copy of a repository: its configs and manifest real files, everything else a link back.

`tune` rewrites the copy's configs for each point it measures; `bench --stand-in` replaces the model step's
graph in it. Either way the real repository is never touched, and nothing large is copied.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..spec import MANIFEST_FILE
from .runner import step_models

KEPT_FILES = (".pbtxt", MANIFEST_FILE)  # what reconfigure rewrites; everything else is linked


def shadow_repository(repo: Path, target: Path, name: str | None = None) -> Path:
    """A copy of `repo` whose configs are real files and everything else links back; with `name`, the index
    files and that model's folders only."""
    repo = Path(repo).resolve()
    folders = set(step_models(repo, name).values()) if name else None
    for path in repo.rglob("*"):
        rel = path.relative_to(repo)
        if any(part.startswith(".") or part == "__pycache__" for part in rel.parts):
            continue
        if folders is not None and rel.parts[0] not in folders and (repo / rel.parts[0]).is_dir():
            continue
        dest = target / rel
        if path.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif path.name.endswith(KEPT_FILES):
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(path, dest)
    return target
