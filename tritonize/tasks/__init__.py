"""The tasks tritonize serves, one module each. A new task is a new module listed here.

Everything else asks a task object (`get`, `detect`, `of`); nothing outside
this package branches on a task's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import TritonizeError
from ..spec import Head
from . import classification, embedding
from .base import Task

if TYPE_CHECKING:
    from ..source import ModelFolder

# Detection order: the first task whose detect() claims a folder wins.
TASKS: dict[str, Task] = {t.name: t for t in (embedding.TASK, classification.TASK)}
NAMES: tuple[str, ...] = tuple(TASKS)


def get(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise TritonizeError(f"unknown task {name!r}", hint=f"use one of: {', '.join(NAMES)}") from None


def of(head: Head) -> Task:
    """The task a head belongs to."""
    return get(head.task)


def detect(folder: ModelFolder) -> Task:
    """The task of a folder's own head, or one line that says what was found."""
    for task in TASKS.values():
        if task.detect(folder):
            return task
    raise TritonizeError(
        f"cannot tell the task of a {folder.architecture or 'model without architectures'}",
        hint="pass --task " + " or --task ".join(NAMES),
    )


def for_outputs(names: list[str] | tuple[str, ...]) -> Task:
    """The task whose ensemble returns these outputs (clients read them from the server's metadata)."""
    for task in TASKS.values():
        if set(task.output_names) == set(names):
            return task
    raise TritonizeError(f"no task returns the outputs {sorted(names)}", hint="is this a tritonize repository?")


__all__ = ["Task", "TASKS", "NAMES", "get", "of", "detect", "for_outputs"]
