"""What Triton runs: ordinary modules, imported and tested here, copied verbatim into each step.

A step's version folder gets its module as `model.py` and, beside it, every
served module that one imports (relative imports: in the package they
resolve inside `tritonize.serving`, in a repository inside the version
folder, which Triton's Python backend imports as a package).
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVING_DIR = Path(__file__).resolve().parent


def _sibling_imports(path: Path) -> list[str]:
    """Modules a served file imports relatively (`from .batching import ...`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module]


def step_files(module: str, entry: str) -> dict[str, Path]:
    """{file name in the version folder: package file} for a step that runs `module`."""
    files = {entry: SERVING_DIR / f"{module}.py"}
    todo = [files[entry]]
    while todo:
        for name in _sibling_imports(todo.pop()):
            target = f"{name}.py"
            if target not in files:
                files[target] = SERVING_DIR / target
                todo.append(files[target])
    return files
