"""The rerank task's part in the API: how a reranker scores pairs for the ranking routes (Cohere's and Jina's
rerank, text-embeddings-inference's /rerank, NVIDIA NIM's /v1/ranking, vLLM's /score, which several tasks serve:
api/routes/), and its row of the route table (tritonize/api/task_routes.py)."""

from __future__ import annotations

import numpy as np
from fastapi import Request

from ...api.catalog import ServedModel
from ...api.routes.inference import run
from ...api.state import ApiState
from ...api.task_routes import TaskRoutes, labelled
from .contract import CONTRACT

ROUTERS = ()  # its routes are the ranking routes, shared with the late-interaction task

ROUTES = TaskRoutes(CONTRACT, ("/v1/rerank", "/v2/rerank", "/rerank", "/v1/ranking", "/score", "/v1/score"),
                    lambda a, name, text: {"model": name, "query": a.sample_first, "documents": [text, "A fox."]},
                    lambda head: labelled("reranker", ("LABEL_0",)))


async def pair_scores(state: ApiState, request: Request, model: ServedModel, pairs: list[tuple[str, str]],
                      raw: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A reranker's score of each (query, text) pair, in order (each pair in one pass), and the answer it came in:
    the head's activation of the served logit (CrossEncoder.predict's default), or with `raw` the logit itself."""
    answer = await run(state, request, model, pairs)
    return CONTRACT.scores(answer, model.head, raw), answer


SCORER = pair_scores
