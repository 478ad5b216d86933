"""The late-interaction task's part in the API: text-embeddings-inference's /embed_all (a vector per token; an
embedder is refused there), how MaxSim scores pairs for the ranking routes, and its row of the route table
(tritonize/api/task_routes.py)."""

from __future__ import annotations

import asyncio

import numpy as np
from fastapi import Request
from pydantic import RootModel

from ...api import schemas as s
from ...api.catalog import ServedModel
from ...api.errors import invalid
from ...api.routes.families import TEI, Router
from ...api.routes.inference import refuse_truncated, run
from ...api.route_call import RouteCall
from ...api.routes.parameters import prompt_of, right_only
from ...api.routes.responses import INFERS, answered, documented
from ...api.schemas import Body, Direction, Texts
from ...api.state import ApiState, state_of
from ...api.task_routes import TaskRoutes
from ...spec import TOKEN_COUNT_OUTPUT, TRUNCATED_OUTPUT
from ..embedding.contract import CONTRACT as EMBEDDING
from ..rerank.contract import CONTRACT as RERANK
from .contract import DOCUMENT, FORMS, CONTRACT, QUERY, vectors

tei = Router(TEI)
ROUTERS = (tei,)
ROUTES = TaskRoutes(CONTRACT, ("/v1/rerank", "/v2/rerank", "/rerank", "/v1/ranking", "/score", "/v1/score",
                              "/embed_all"),
                    lambda a, name, text: {"model": name, "query": RERANK.sample_first, "documents": [text, "A fox."]},
                    document_vectors=("/embed_all", lambda name, texts: {"model": name, "inputs": texts}),
                    accepts=lambda heads: {"prompt_name": {"anyOf": [{"type": "string", "enum": list(FORMS)},
                                                                     {"type": "null"}],
                                                           "description": "the form each text is encoded in "
                                                                          "(none: document)"}})


class TEIEmbedAllRequest(Body):
    inputs: Texts
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    prompt_name: str | None = None
    model: str | None = None


class TEITokenStates(RootModel[list[list[list[float]]]]):
    """Per input, a vector per token."""


async def multi_vectors(state: ApiState, request: Request, model: ServedModel, texts: list[str],
                        form: str) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
    """A late-interaction model's vectors of each text in one form (query or document), and the answer."""
    answer = await run(state, request, model, [(t, form) for t in texts])
    return vectors(answer), answer


async def maxsim_pairs(state: ApiState, request: Request, model: ServedModel, pairs: list[tuple[str, str]],
                       raw: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """A late-interaction model's MaxSim of each (query, text) pair, in order: each distinct query encoded once
    as a query and each distinct text once as a document, both requests in flight together, and MaxSim here
    (the head's arithmetic, the library's `similarity`). The answer holds the documents' rows (their truncation
    flags, by index) and every token read. MaxSim has no activation: the raw score is the score."""
    queries, documents = list(dict.fromkeys(q for q, _ in pairs)), list(dict.fromkeys(d for _, d in pairs))
    (query_vectors, asked), (document_vectors, answer) = await asyncio.gather(
        multi_vectors(state, request, model, queries, QUERY),
        multi_vectors(state, request, model, documents, DOCUMENT))
    by_query = dict(zip(queries, query_vectors))
    by_document = dict(zip(documents, document_vectors))
    values = np.array([model.head.maxsim(by_query[q], [by_document[d]])[0] for q, d in pairs], dtype=np.float32)
    if TRUNCATED_OUTPUT in answer:  # by pair, as a reranker's answer holds them
        cut = dict(zip(documents, answer[TRUNCATED_OUTPUT].reshape(-1)))
        answer = {**answer, TRUNCATED_OUTPUT: np.array([[cut[d]] for _, d in pairs])}
    if TOKEN_COUNT_OUTPUT in answer and TOKEN_COUNT_OUTPUT in asked:
        answer = {**answer, TOKEN_COUNT_OUTPUT: np.concatenate([asked[TOKEN_COUNT_OUTPUT], answer[TOKEN_COUNT_OUTPUT]])}
    return values, answer


SCORER = maxsim_pairs


@tei.post("/embed_all", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed_all(body: TEIEmbedAllRequest, request: Request) -> TEITokenStates:
    """A vector per token, where the served answer carries them: a late-interaction model's scored vectors, each
    text as a document unless `prompt_name` names the query form. An embedder pools inside its graph, so its
    per-token states never leave it: refused."""
    # Unnamed, the one late-interaction model answers (an embedder beside it is not asked); a lone embedder refuses.
    asked = (EMBEDDING, CONTRACT) if body.model or not state_of(request).catalog.of_task(CONTRACT) else CONTRACT
    call = RouteCall.of(request, asked, body.model)
    model = call.model
    right_only(body.truncation_direction)
    texts = call.texts(body.inputs, "inputs")
    if model.contract is not CONTRACT:
        prompt_of(model, body.prompt_name)
        raise invalid(f"embed_all is not served for {model.name}: its graph pools the token states inside "
                      f"({model.head.pooling} pooling) and returns one vector per text; /embed returns those")
    if body.prompt_name not in (None, *FORMS):
        raise invalid(f"prompt_name {body.prompt_name!r} is not a form of {model.name}: {' or '.join(FORMS)}",
                      "prompt_name")
    answer = await call.infer([(t, body.prompt_name or DOCUMENT) for t in texts])
    found = vectors(answer)
    refuse_truncated(answer, body.truncate, model)
    return TEITokenStates.model_construct(found)
