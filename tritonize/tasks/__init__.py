"""The tasks tritonize serves, one package each. A new task is a new package listed here.

Everything else asks a task object (`get`, `detect`, `of`), or a task's answers (`for_outputs`); nothing
outside this package branches on a task's name.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import TritonizeError
from ..serving.batching import ROW_FIELDS
from ..spec import Head, TaskOption
from . import (
    classification,
    embedding,
    multi_vector,
    question_answering,
    rerank,
    sparse_embedding,
    token_classification,
)
from .answers import Answers
from .task import Task

if TYPE_CHECKING:
    from ..folder import ModelFolder

# Each folder is claimed by at most one task's detect(); the order is only the order of listings.
TASKS: dict[str, Task] = {
    t.name: t
    for t in (embedding.TASK, sparse_embedding.TASK, multi_vector.TASK, classification.TASK, rerank.TASK,
              token_classification.TASK, question_answering.TASK)
}
NAMES: tuple[str, ...] = tuple(TASKS)
# Every task's own options of `tritonize generate`, in the tasks' order: GenerateOptions and its flags gather them.
OPTIONS: tuple[TaskOption, ...] = tuple(o for t in TASKS.values() for o in t.own_options)


def get(name: str) -> Task:
    try:
        return TASKS[name]
    except KeyError:
        raise TritonizeError(f"unknown task {name!r}", hint=f"use one of: {', '.join(NAMES)}") from None


def of(head: Head) -> Task:
    """The task a head belongs to."""
    return get(head.task)


def _what(folder: ModelFolder) -> str:
    if folder.late_interaction:
        return f"{folder.late_interaction.removeprefix('a ')} ({folder.architecture or folder.model_type})"
    if folder.is_cross_encoder:
        return f"sentence-transformers CrossEncoder ({folder.architecture})"
    if folder.is_sparse_encoder:
        return f"sentence-transformers SparseEncoder ({folder.architecture or folder.model_type})"
    if folder.modules is not None:
        return f"sentence-transformers folder ({folder.architecture or folder.model_type})"
    return folder.architecture or f"{folder.model_type} model without architectures"


SUPPORTED = "; ".join(f"{t.name}: {t.serves}" for t in TASKS.values())


def detect(folder: ModelFolder) -> Task:
    """The task of a folder's own head, or one line that says what was found and what is supported."""
    claimed = [t for t in TASKS.values() if t.detect(folder)]
    if len(claimed) == 1:
        return claimed[0]
    if claimed:  # two tasks claiming one folder is a bug in their detect(), never a guess
        raise TritonizeError(f"{_what(folder)} is claimed by {', '.join(t.name for t in claimed)}")
    raise TritonizeError(f"tritonize cannot serve a {_what(folder)} exactly", hint=f"it serves {SUPPORTED}")


def choose(folder: ModelFolder, requested: str | None) -> Task:
    """The folder's own task; a --task that contradicts the folder's head is refused, never obeyed."""
    if not requested:
        return detect(folder)
    task = get(requested)
    if not task.accepts(folder):
        try:
            own = f"its head is {detect(folder).name}"
        except TritonizeError:
            own = "tritonize cannot serve its head"
        raise TritonizeError(
            f"--task {requested} contradicts the folder: a {_what(folder)} ({own})",
            hint=f"{task.name} serves {task.serves}",
        )
    return task


def for_outputs(names: list[str] | tuple[str, ...]) -> Answers:
    """The answers of the task whose ensemble returns these outputs (clients read them from the server's metadata)."""
    answers = set(names) - set(ROW_FIELDS)  # every tokenizing ensemble also reports its rows' tokens
    for task in TASKS.values():
        if set(task.answers.output_names) == answers:
            return task.answers
    raise TritonizeError(f"no task returns the outputs {sorted(names)}", hint="is this a tritonize repository?")


__all__ = ["Answers", "Task", "TASKS", "NAMES", "OPTIONS", "get", "of", "detect", "choose", "for_outputs"]
