"""What Triton runs: ordinary modules, imported and tested here, copied verbatim into each step.

A step's version folder gets its module as `model.py` and, beside it, every
served module that one imports (relative imports: in the package they
resolve inside `tritonize.serving`, in a repository inside the version
folder, which Triton's Python backend imports as a package).

The modules here are the ones every task shares. A task's own served modules
live in its package's `served/` folder, which `tritonize.tasks` joins to this
package's path when it registers the task (`add_served`): they are imported
as `tritonize.serving.<name>` and import the shared ones as siblings, in the
package as in a version folder.
"""

from __future__ import annotations

import ast
from pathlib import Path

SERVING_DIR = Path(__file__).resolve().parent
SERVED_FOLDER = "served"  # a task package's folder of served modules


def add_served(folder: Path) -> None:
    """Serve the modules of a task's `served/` folder as this package's; a name that is already served (shared,
    or another task's) is refused: a version folder is flat, so two files of one name cannot both be copied."""
    if str(folder) in __path__:
        return
    names = {p.name for p in folder.glob("*.py")} - {"__init__.py"}
    taken = sorted(names & set(served_modules()))
    if taken:
        raise ValueError(f"{folder}: {', '.join(taken)} is already a served module of tritonize.serving")
    __path__.append(str(folder))


def served_modules() -> dict[str, Path]:
    """{file name: path} of every served module: the shared ones and those of each registered task."""
    return {p.name: p for folder in map(Path, __path__) for p in sorted(folder.glob("*.py")) if p.name != "__init__.py"}


def _sibling_imports(path: Path) -> list[str]:
    """Modules a served file imports relatively (`from .batching import ...`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 and n.module]


def step_files(module: str, entry: str) -> dict[str, Path]:
    """{file name in the version folder: package file} for a step that runs `module`."""
    served = served_modules()
    if f"{module}.py" not in served:
        raise ValueError(f"no served module {module!r}: a task's are in its package's {SERVED_FOLDER}/ folder")
    files = {entry: served[f"{module}.py"]}
    todo = [files[entry]]
    while todo:
        for name in _sibling_imports(todo.pop()):
            target = f"{name}.py"
            if target not in files:
                files[target] = served[target]
                todo.append(files[target])
    return files
