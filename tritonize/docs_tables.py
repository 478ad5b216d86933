"""The parts of the docs that list what the registry knows, written from it: the tasks and their ensembles
(docs/architecture.md), which tasks each HTTP route serves (docs/api.md's route table), the outputs
dashboard's panels of the tasks' statistics (runtime/dashboards.py) and the compose profile's drift rules, one per
histogram (runtime/monitoring.py).

`make docs` rewrites them; a unit test fails while they differ from the registry. A generated part sits between
`<!-- generated: NAME -->` and `<!-- end: NAME -->`; in the route table (`route-tasks`) only the last cell of each
task route's row is written, its shape staying prose.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

from . import tasks
from .api.task_routes import task_routes
from .runtime import dashboards, monitoring
from .spec import FIRST, MODEL, POST, Pipeline

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = "docs/architecture.md"
API = "docs/api.md"
ROUTE_ROW = re.compile(r"^\| `(?:GET|POST) (/[^`\s]*)`")


def _names(names) -> str:
    return ", ".join(f"`{n}`" for n in names)


def ensemble(pipeline: Pipeline) -> str:
    """The steps a pipeline runs, each Python step by its served module."""
    steps = []
    for role in pipeline.roles:
        if role is FIRST:
            calls = ", which calls the model step" if pipeline.orchestrates else ""
            runs = "graph" if pipeline.runs_graph(role) else f"`{pipeline.served_module(role)}`"
            steps.append(f"first step ({runs}{calls})")
        elif role is MODEL and not pipeline.orchestrates:
            steps.append("model")
        elif role is POST:
            steps.append(f"post step (`{pipeline.served_module(role)}`)")
    return " → ".join(steps)


def task_table() -> str:
    rows = ["| task | ensemble | serves |", "|---|---|---|"]
    for name, task in tasks.tasks().items():
        contract = task.contract
        flow = (f"{_names(t.name for t in contract.text_inputs)} → {ensemble(task.pipeline)} → "
                f"{_names(contract.output_names)}")
        rows.append(f"| `{name}` | {flow} | {task.serves} |")
    return "\n".join(rows)


def route_tasks() -> dict[str, list[str]]:
    """path -> the tasks whose routes it is, in registry order."""
    served: dict[str, list[str]] = {}
    for routes in task_routes():
        for path in routes.paths:
            served.setdefault(path, []).append(routes.contract.name)
    return served


def with_route_tasks(table: str) -> str:
    """The route table with each task route's last cell the tasks that serve it."""
    served, lines = route_tasks(), []
    for line in table.split("\n"):
        found = ROUTE_ROW.match(line)
        if found and found.group(1) in served:
            cells = line.split(" | ")
            line = " | ".join(cells[:-1] + [", ".join(served[found.group(1)]) + " |"])
        lines.append(line)
    return "\n".join(lines)


def with_part(text: str, name: str, write: Callable[[str], str]) -> str:
    """The text with the part between the markers of `name` written anew from what it holds now."""
    start, end = f"<!-- generated: {name} -->", f"<!-- end: {name} -->"
    if start not in text or end not in text:
        raise ValueError(f"no {start} ... {end} to write into")
    head, rest = text.split(start, 1)
    part, tail = rest.split(end, 1)
    return f"{head}{start}\n{write(part.strip(chr(10)))}\n{end}{tail}"


WRITERS: dict[str, Callable[[str], str]] = {
    ARCHITECTURE: lambda text: with_part(text, "tasks", lambda _: task_table()),
    API: lambda text: with_part(text, "route-tasks", with_route_tasks),
    dashboards.OUTPUTS_DASHBOARD: dashboards.written,
    str(monitoring.COMPOSE_RULES): lambda _: monitoring.compose_rules(),
}


def rewritten(root: Path = ROOT) -> dict[str, str]:
    """Each file whose generated parts differ from the registry, and its text as the registry writes it."""
    found = {}
    for rel, write in WRITERS.items():
        text = (root / rel).read_text()
        new = write(text)
        if new != text:
            found[rel] = new
    return found


def stale(root: Path = ROOT) -> list[str]:
    """The files whose generated parts differ from the registry."""
    return list(rewritten(root))


def main() -> int:
    for rel, text in rewritten().items():
        (ROOT / rel).write_text(text)
        print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
