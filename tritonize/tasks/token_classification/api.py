"""The token-classification task's route: tritonize's own /v1/entities (no standard exists), its bodies, and its
row of the route table (tritonize/api/task_routes.py)."""

from __future__ import annotations

from typing import Union

from fastapi import Request

from ...api import schemas as s
from ...api.routes.families import TRITONIZE, Router
from ...api.route_call import RouteCall
from ...api.routes.responses import INFERS, answered, documented
from ...api.schemas import Body, Text, TextList
from ...api.task_routes import TaskRoutes
from .contract import CONTRACT

router = Router(TRITONIZE)
ROUTERS = (router,)
ROUTES = TaskRoutes(CONTRACT, ("/v1/entities",), lambda a, name, text: {"model": name, "inputs": [text]})


class EntitiesRequest(Body):
    inputs: Union[Text, TextList]
    model: str | None = None


class Entity(Body):
    """A span as transformers' token-classification pipeline reports it: `entity_group` where the model
    aggregates, `entity` and `index` per token where it does not (--aggregation none)."""

    entity_group: str | None = None
    entity: str | None = None
    index: int | None = None
    score: float
    word: str
    start: int | None
    end: int | None


class EntitiesResult(Body):
    index: int
    entities: list[Entity]


class EntitiesResponse(Body):
    model: str
    data: list[EntitiesResult]


@router.post("/v1/entities", responses=documented(s.OpenAIError, INFERS))
@answered
async def entities(body: EntitiesRequest, request: Request) -> EntitiesResponse:
    call = RouteCall.of(request, CONTRACT, body.model)
    found = CONTRACT.entities(await call.infer([(t,) for t in call.texts(body.inputs, "inputs")]))
    return EntitiesResponse.model_construct(model=call.model.name, data=[
        EntitiesResult.model_construct(index=i, entities=e) for i, e in enumerate(found)])
