from fastapi import Request

from tritonize.api import schemas as s
from tritonize.api.route_call import RouteCall
from tritonize.api.routes.families import TRITONIZE, Router
from tritonize.api.routes.responses import INFERS, answered, documented
from tritonize.api.task_routes import TaskRoutes

from .contract import CONTRACT

router = Router(TRITONIZE)
ROUTERS = (router,)
ROUTES = TaskRoutes(CONTRACT, ("/v1/shout",), lambda a, name, text: {"model": name, "inputs": [text]})


class ShoutRequest(s.Body):
    inputs: s.TextList
    model: str | None = None


class ShoutResponse(s.Body):
    data: list[list[float]]


@router.post("/v1/shout", responses=documented(s.OpenAIError, INFERS))
@answered
async def shout(body: ShoutRequest, request: Request) -> ShoutResponse:
    call = RouteCall.of(request, CONTRACT, body.model)
    answer = await call.infer([(t,) for t in call.texts(body.inputs, "inputs")])
    return ShoutResponse.model_construct(data=CONTRACT.vectors(answer).tolist())
