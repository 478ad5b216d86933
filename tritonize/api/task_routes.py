"""Which routes serve which task: the table read by the routes, the document, /info and printed examples.

A task's contract (tritonize/tasks/<task>/contract.py) says what its ensemble takes and returns; its row here, declared
in its api.py (`ROUTES`) and found through the task registry, says what the HTTP API makes of it: the routes that
serve it, a sample request for `deploy.py local up` to print, the `model_type` text-embeddings-inference's /info
reports, and what its served heads accept of a request's fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import tasks
from ..spec import Head
from ..tasks.contract import SAMPLE_TEXT, TaskContract


@dataclass(frozen=True)
class TaskRoutes:
    contract: TaskContract
    paths: tuple[str, ...]  # the routes that serve the task; the first is the one examples call
    sample: Callable[[TaskContract, str, str], dict]  # (contract, model name, text) -> a JSON body for paths[0]
    # text-embeddings-inference's /info `model_type` for a head; None: the task's name, with nothing more to say
    model_type: Callable[[Head], dict] | None = None
    # What the served heads all accept of a request's fields, as JSON Schema (openapi.py writes it into the
    # document); None: nothing beyond the request models' own schema.
    accepts: Callable[[tuple[Head, ...]], dict[str, dict]] | None = None
    # What the fields that ask a long text cut at its start or into windows accept where no served model can
    # (ServedModel.cut_refusal), as `accepts` writes them; None: the task's routes ask no such cut.
    uncut: dict[str, dict] | None = None
    # A route that returns documents' vectors alone, and a body for it: (route, (model name, texts) -> body). The
    # rerank benchmark measures it beside the rerank it is part of; None: the task has none apart from its answer.
    document_vectors: tuple[str, Callable[[str, list[str]], dict]] | None = None

    def info_type(self, head: Head) -> dict:
        return self.model_type(head) if self.model_type else {head.task: {}}

    def api_sample(self, name: str, text: str = SAMPLE_TEXT) -> tuple[str, dict]:
        """(route, JSON body) of a request this task's model answers, for printed examples."""
        return self.paths[0], self.sample(self.contract, name, text)


def prompt_names(heads: tuple[Head, ...]) -> dict[str, dict]:
    """The prompt names every served head declares (sentence-transformers' `prompts`)."""
    names = set.intersection(*(set(dict(h.prompts)) for h in heads))
    return {"prompt_name": {"anyOf": [{"type": "string", "enum": ["", *sorted(names)]}, {"type": "null"}],
                            "description": "a prompt the model declares"}}


def labelled(kind: str, labels: tuple[str, ...]) -> dict:
    return {kind: {"id2label": dict(enumerate(labels)), "label2id": {label: i for i, label in enumerate(labels)}}}


def task_routes() -> tuple[TaskRoutes, ...]:
    """Every registered task's row, in registry order (a task the API does not serve has no api.py)."""
    return tuple(api.ROUTES for api in tasks.sides("api"))


def routes_of(head: Head) -> TaskRoutes:
    return next(r for r in task_routes() if r.contract.name == head.task)


def __getattr__(name: str):
    """TASK_ROUTES and BY_TASK, read from the registry when asked."""
    if name == "TASK_ROUTES":
        return task_routes()
    if name == "BY_TASK":
        return {r.contract.name: r for r in task_routes()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
