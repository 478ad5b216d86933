"""The sparse-embedding task's route: text-embeddings-inference's /embed_sparse, its body, and its row of the
route table (tritonize/api/task_routes.py)."""

from __future__ import annotations

from fastapi import Request
from pydantic import RootModel

from ...api import schemas as s
from ...api.routes.families import TEI, Router
from ...api.route_call import RouteCall
from ...api.routes.inference import refuse_truncated
from ...api.routes.parameters import prompt_of, right_only
from ...api.routes.responses import INFERS, answered, documented
from ...api.schemas import Body, Direction, Texts
from ...api.task_routes import TaskRoutes, prompt_names
from .contract import CONTRACT

tei = Router(TEI)
ROUTERS = (tei,)
ROUTES = TaskRoutes(CONTRACT, ("/embed_sparse",), lambda a, name, text: {"model": name, "inputs": [text]},
                    accepts=prompt_names)


class TEISparseRequest(Body):
    inputs: Texts
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    prompt_name: str | None = None
    model: str | None = None


class TEISparseValue(Body):
    index: int
    value: float


class TEISparseEmbeddings(RootModel[list[list[TEISparseValue]]]):
    """Per input, its terms: vocabulary ids ascending."""


@tei.post("/embed_sparse", responses=documented(s.TEIError, INFERS))
@answered
async def tei_embed_sparse(body: TEISparseRequest, request: Request) -> TEISparseEmbeddings:
    """SPLADE terms as text-embeddings-inference returns them: per text, `[{"index", "value"}]`, ascending ids."""
    call = RouteCall.of(request, CONTRACT, body.model)
    right_only(body.truncation_direction)
    texts = call.texts(body.inputs, "inputs")
    prompt = prompt_of(call.model, body.prompt_name)
    answer = await call.infer([(prompt + t,) for t in texts])
    refuse_truncated(answer, body.truncate, call.model)
    return TEISparseEmbeddings.model_construct(CONTRACT.terms(answer))
