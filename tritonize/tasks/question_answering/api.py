"""The question-answering task's route: tritonize's own /v1/answers (no standard exists), its bodies, and its row
of the route table (tritonize/api/task_routes.py)."""

from __future__ import annotations

from typing import Annotated, Union

from fastapi import Request
from pydantic import Field

from ...api import schemas as s
from ...api.routes.families import TRITONIZE, Router
from ...api.route_call import RouteCall
from ...api.routes.responses import INFERS, answered, documented
from ...api.schemas import Body, Text, refused_beyond
from ...api.task_routes import TaskRoutes
from .contract import CONTRACT

router = Router(TRITONIZE)
ROUTERS = (router,)
ROUTES = TaskRoutes(CONTRACT, ("/v1/answers",),
                    lambda a, name, text: {"model": name, "inputs": {"question": a.sample_first, "context": text}})


class QAPair(Body):
    question: Text
    context: Text


class AnswersRequest(Body):
    inputs: Union[QAPair, Annotated[list[QAPair], refused_beyond(minItems=1)]]
    model: str | None = None


class Answer(Body):
    """The question-answering pipeline's answer: the span and its score."""

    answer: str
    score: float
    start: int
    end: int


class AnswerResult(Body):
    index: int
    answer: Answer | None = Field(description="null where the context holds no answer")


class AnswersResponse(Body):
    model: str
    data: list[AnswerResult]


@router.post("/v1/answers", responses=documented(s.OpenAIError, INFERS))
@answered
async def answers(body: AnswersRequest, request: Request) -> AnswersResponse:
    call = RouteCall.of(request, CONTRACT, body.model)
    pairs = [body.inputs] if isinstance(body.inputs, QAPair) else list(body.inputs)
    questions = call.texts([p.question for p in pairs], "question")
    contexts = call.texts([p.context for p in pairs], "context")
    found = CONTRACT.spans(await call.infer(list(zip(questions, contexts))))
    return AnswersResponse.model_construct(model=call.model.name, data=[
        AnswerResult.model_construct(index=i, answer=a) for i, a in enumerate(found)])
