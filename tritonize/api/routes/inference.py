"""One inference through a model's ensemble, and what the routes read of every answer: tokens, truncation, and
the ranking of scored texts (by whichever task scores them: each task's api.py SCORER)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import ModuleType

import numpy as np
from fastapi import Request

from ... import tasks
from ...spec import TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT
from ...tasks.contract import TaskContract
from ..backend import Parameters
from ..catalog import ServedModel
from ..errors import invalid
from ..state import ApiState, noted
from . import canary


async def run(state: ApiState, request: Request, model: ServedModel,
              rows: Sequence[tuple[str, ...]], parameters: Parameters | None = None) -> dict[str, np.ndarray]:
    """One inference of these rows through the model's ensemble (the version its rollout routes to): its answers'
    outputs, with its token counts where the ensemble reports them; `parameters` reach every step."""
    contract: TaskContract = model.contract
    return await infer_inputs(state, request, model, contract.request(rows), parameters)


def outputs_of(state: ApiState, model: ServedModel) -> tuple[str, ...]:
    """What a route asks of the model's ensemble: its task's outputs, and token counts where it reports them."""
    return _asked(model.contract.output_names, state.outputs.get(model.name, ()))


@functools.lru_cache(maxsize=256)
def _asked(task_outputs: tuple[str, ...], reported: tuple[str, ...]) -> tuple[str, ...]:
    return (*task_outputs, *(o for o in (TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT) if o in reported))


async def infer_inputs(state: ApiState, request: Request, model: ServedModel, inputs: Mapping[str, Sequence],
                       parameters: Parameters | None = None) -> dict[str, np.ndarray]:
    """One inference of these ensemble inputs (texts, or images' bytes) through the version the rollout routes to;
    `parameters` reach every step."""
    noted(request)["model"] = model.name
    return await canary.infer(state, request, model, inputs, outputs_of(state, model), parameters)


def tokens(answer: dict[str, np.ndarray]) -> int:
    counts = answer.get(TOKEN_COUNT_OUTPUT)
    return int(counts.sum()) if counts is not None else 0


def refuse_truncated(answer: dict[str, np.ndarray], truncate: bool | None, model: ServedModel,
                     status: int = 413, asked: str = "false") -> None:
    """`truncate: false` (text-embeddings-inference's strict mode; NIM's NONE, `asked`): a text the model could
    not read whole is refused."""
    cut = answer.get(TRUNCATED_OUTPUT)
    if truncate is False and cut is not None and cut.any():
        rows = np.flatnonzero(cut.reshape(-1)).tolist()
        raise invalid(f"inputs {rows[:5]} are longer than {model.name} reads ({model.max_length} tokens) and "
                      f"truncate is {asked}", "truncate", status)


# How a kind of model that ranks texts for a query scores a list of (query, text) pairs, and whether raw (the
# model's logits, before any activation its task applies): its task's api.py SCORER (a reranker reads each pair
# in one pass; a late-interaction model scores two texts' vectors by MaxSim).
PairScorer = Callable[[ApiState, Request, ServedModel, list[tuple[str, str]], bool],
                      Awaitable[tuple[np.ndarray, dict[str, np.ndarray]]]]


def scorers() -> dict[TaskContract, PairScorer]:
    """Every task that scores pairs, by its contract: what the rerank, ranking and score routes serve."""
    return _scorers(tasks.sides("api"))


@functools.lru_cache(maxsize=None)
def _scorers(apis: tuple[ModuleType, ...]) -> dict[TaskContract, PairScorer]:
    return {m.ROUTES.contract: m.SCORER for m in apis if getattr(m, "SCORER", None)}


# How a kind of model that embeds images makes its ensemble's inputs of a request's images (encoded files' bytes):
# its task's api.py IMAGES. The embeddings routes serve images to the models of those tasks.
ImageInputs = Callable[[list[bytes]], dict[str, list[bytes]]]


def image_inputs() -> dict[TaskContract, ImageInputs]:
    """Every task whose models embed images, by its contract."""
    return _image_inputs(tasks.sides("api"))


@functools.lru_cache(maxsize=None)
def _image_inputs(apis: tuple[ModuleType, ...]) -> dict[TaskContract, ImageInputs]:
    return {m.ROUTES.contract: m.IMAGES for m in apis if getattr(m, "IMAGES", None)}


def ranking() -> tuple[TaskContract, ...]:
    return tuple(scorers())


async def scores(state: ApiState, request: Request, model: ServedModel, query: str, documents: list[str],
                 raw: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The model's score of each document for the query (raw: its logit), in the documents' order."""
    return await scorers()[model.contract](state, request, model, [(query, d) for d in documents], raw)


def ranked(values: np.ndarray, top_n: int | None) -> list[int]:
    """Indices by score, best first (ties keep the documents' order), at most top_n."""
    order = np.argsort(-values, kind="stable").tolist()
    return order[:top_n] if top_n else order
