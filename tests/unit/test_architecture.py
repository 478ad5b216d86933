"""The package's rules of architecture, in one place: imports run one way (folder -> tasks -> stages) with no
circle anywhere, a task's contract never imports what builds its repository, a client loads no model library,
nothing outside the tasks branches on a task's name, and no module or function grows past what a reader holds.

Every import counts, those inside functions too: a deferred import still ties two modules together. Only what
`if TYPE_CHECKING:` guards is left out: it never runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from support import REPO_ROOT
from tritonize import serving, tasks

PACKAGE = REPO_ROOT / "tritonize"


def module_name(path: Path) -> str:
    if path.parent.name == serving.SERVED_FOLDER and path.name != "__init__.py":
        return f"{serving.__name__}.{path.stem}"  # a task's served module is imported as tritonize.serving's
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def executed(tree: ast.AST) -> list[ast.AST]:
    """Every node of the tree but those under `if TYPE_CHECKING:` (annotations only: never imported)."""
    found, todo = [], [tree]
    while todo:
        node = todo.pop()
        found.append(node)
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo.extend(node.orelse)
            continue
        todo.extend(ast.iter_child_nodes(node))
    return found


def imports() -> dict[str, set[str]]:
    """module -> the package's modules it imports (a `from . import x` names the submodule x where there is one)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in executed(ast.parse(path.read_text(encoding="utf-8"))):
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


def readers() -> list[str]:
    """What reads answers, one module per task and side (contract.py, calls.py; api.py where the API serves the
    task), and the protocol they share: everything clients, the API and the bench's readers import."""
    sides = [m.__name__ for side in ("contract", "calls", "api") for m in tasks.sides(side)]
    return ["tritonize.tasks.contract", *sides]


def test_reading_a_tasks_answers_never_imports_what_builds_its_repository() -> None:
    """contract.py (what clients, the API and the bench's readers use) stands beneath task.py, never on it."""
    graph = imports()
    found = [m for m in readers() if m in graph]
    assert len(found) == 1 + len(tasks.PACKAGES) + len(tasks.sides("calls")) + len(tasks.sides("api"))
    for reader in found:
        assert {m for m in reaches(graph, reader) if m.endswith(".task")} == set(), reader


# What builds a repository: no reader may load it, in any interpreter. spec.py is not among them: it declares the
# heads and names the answers read (standard library and tritonize.serving only).
BUILDS = ("tritonize.source", "tritonize.export", "tritonize.verify", "tritonize.generate", "tritonize.repository",
          "tritonize.graph_tokenizer", "tritonize.chain", "torch", "transformers", "onnx", "sentence_transformers")


@pytest.mark.parametrize("reader", readers())
def test_importing_a_reader_loads_nothing_that_builds(reader: str) -> None:
    """The real import graph, package __init__s included: a fresh interpreter imports the reader, and nothing that
    builds (a task.py, a stage, torch, transformers, onnx) is in sys.modules afterwards."""
    import subprocess
    import sys

    probe = (f"import sys, {reader}; builds = {BUILDS!r}; print(sorted(m for m in sys.modules if m.endswith('.task') "
             "or any(m == b or m.startswith(b + '.') for b in builds)))")
    result = subprocess.run([sys.executable, "-c", probe], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]", reader


def test_reading_a_served_repository_loads_nothing_that_builds(tmp_path: Path) -> None:
    """At use too: a fresh interpreter reads a repository's manifest as the API does, asks each thing the routes
    ask of its model, and loads no task.py and nothing that builds."""
    import subprocess
    import sys

    from support.specs import EMBEDDING, PASSED
    from tritonize import repository
    from tritonize.spec.options import GenerateOptions

    options = GenerateOptions(model="/models/x", tokenizer="python")
    repo = repository.plan(options, EMBEDDING, "demo")
    (manifest,) = [f for f in repository.render(repo, repository.manifest(options, repo), PASSED)
                   if f.path == "tritonize.yaml"]
    (tmp_path / "tritonize.yaml").write_text(manifest.text)
    probe = (
        "import sys\n"
        "from tritonize.api.catalog import Catalog\n"
        "from tritonize.api.statistics import ApiStatistics\n"
        f"(model,) = Catalog.read({str(tmp_path)!r}).models\n"
        "asked = (model.contract.name, model.head, model.cut_refusal, model.prompts, model.max_batch_size,\n"
        "         model.max_length, ApiStatistics.counts_here(model), model.contract.sample_body())\n"
        f"builds = {BUILDS!r}\n"
        "print(asked[0], sorted(m for m in sys.modules if m.endswith('.task')\n"
        "                       or any(m == b or m.startswith(b + '.') for b in builds)))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "embedding []"


def test_the_probe_sees_a_build_module() -> None:
    """The same probe on a task.py finds it: an empty list above is an answer, not a blind spot."""
    import subprocess
    import sys

    probe = "import sys, tritonize.tasks.embedding.task; print('tritonize.tasks.embedding.task' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.stdout.strip() == "True"


def test_a_client_loads_no_model_library() -> None:
    """Importing the client (and with it every task's contract) loads neither torch nor transformers."""
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


MAX_MODULE_LINES, MAX_FUNCTION_LINES = 500, 80


def oversized(root: Path) -> list[str]:
    """Each module over MAX_MODULE_LINES lines and each function over MAX_FUNCTION_LINES, with its size."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > MAX_MODULE_LINES:
            found.append(f"{path.relative_to(root)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(f"{path.relative_to(root)}: {node.name} is {length} lines")
    return found


def test_no_module_over_500_lines_and_no_function_over_80() -> None:
    assert oversized(PACKAGE) == []


def test_the_size_check_sees_a_long_function(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("def long():\n" + "    x = 1\n" * 80 + "    return x\n")
    (tmp_path / "short.py").write_text("def short():\n" + "    x = 1\n" * 78 + "    return x\n")
    assert oversized(tmp_path) == ["long.py: long is 82 lines"]
