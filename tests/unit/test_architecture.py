"""The package's rules of architecture, in one place: imports run one way (folder -> tasks -> stages) with no
circle anywhere, a task's answers never import what builds its repository, a client loads no model library, and
nothing outside the tasks branches on a task's name.

Every import counts, those inside functions too: a deferred import still ties two modules together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support import REPO_ROOT
from tritonize import tasks

PACKAGE = REPO_ROOT / "tritonize"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """module -> the package's modules it imports (a `from . import x` names the submodule x where there is one)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")
                base = base[: len(base) - node.level + 1] if node.level else []
                stem = ".".join(base + ([node.module] if node.module else []))
                targets = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in modules else stem for a in node.names]
            else:
                continue
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def reaches(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    return seen


def test_no_module_imports_itself_through_others() -> None:
    assert cycles(imports()) == []


def test_the_folder_reader_and_the_tasks_stand_beneath_the_stages() -> None:
    graph = imports()
    stages = {"tritonize.source", "tritonize.export", "tritonize.verify", "tritonize.generate", "tritonize.repository"}
    stages |= {m for m in graph if m.startswith("tritonize.repository.")}
    assert reaches(graph, "tritonize.folder") & ({"tritonize.tasks"} | stages) == set()
    for task in [m for m in graph if m.startswith("tritonize.tasks")]:
        assert reaches(graph, task) & stages == set(), task


def test_the_checker_sees_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_reading_a_tasks_answers_never_imports_what_builds_its_repository() -> None:
    """answers.py (what clients, the API and the bench's readers use) stands beneath task.py, never on it."""
    graph = imports()
    readers = [m for m in graph if m == "tritonize.tasks.answers" or (m.startswith("tritonize.tasks.") and m.endswith(".answers"))]
    assert len(readers) == 8
    for reader in readers:
        assert {m for m in reaches(graph, reader) if m.endswith(".task")} == set(), reader


def test_a_client_loads_no_model_library() -> None:
    """Importing the client (and with it every task's answers) loads neither torch nor transformers."""
    import subprocess
    import sys

    probe = "import sys, tritonize.client; print(sorted({'torch', 'transformers', 'onnx'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=PACKAGE.parent, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_no_module_outside_the_tasks_branches_on_a_task_name() -> None:
    """No module outside tritonize/tasks/ compares against a task's name."""
    import re

    root = Path(tasks.__file__).resolve().parents[1]
    pattern = re.compile(r"""task\s*[!=]=\s*["'](""" + "|".join(tasks.NAMES) + r""")["']""")
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py") if "tasks" not in p.parts and pattern.search(p.read_text())]
    assert offenders == []



def test_a_unit_test_cannot_start_a_server() -> None:
    """tests/unit/conftest.py refuses Triton and its supervisor, so where a test lives says whether it starts one."""
    import subprocess
    import sys

    from tritonize.runtime.instance import SUPERVISOR_MODULE

    for command in (["tritonserver", "--model-repository", "/nowhere"], [sys.executable, "-m", SUPERVISOR_MODULE, "/x"]):
        with pytest.raises(AssertionError, match="belongs in tests/e2e/"):
            subprocess.Popen(command)
