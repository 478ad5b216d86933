"""The classification task's routes: text-embeddings-inference's /predict and vLLM's /classify, their bodies,
and its row of the route table (tritonize/api/task_routes.py)."""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Literal, Optional, Union

import numpy as np
from fastapi import Request
from pydantic import BeforeValidator, Field, RootModel

from ...api import schemas as s
from ...api.errors import invalid
from ...api.routes.families import TEI, VLLM, Router
from ...api.route_call import RouteCall
from ...api.routes.inference import refuse_truncated, tokens
from ...api.routes.parameters import right_only
from ...api.routes.responses import INFERS, answered, documented
from ...api.schemas import Body, Direction, Text, TextList, Texts, Usage, refused_beyond, whole
from ...api.task_routes import TaskRoutes, labelled
from .contract import CONTRACT

tei, vllm = Router(TEI), Router(VLLM)
ROUTERS = (tei, vllm)
ROUTES = TaskRoutes(CONTRACT, ("/predict", "/classify"), lambda a, name, text: {"model": name, "inputs": text},
                    lambda head: labelled("classifier", head.labels))


class TEIPredictRequest(Body):
    inputs: Union[Text, TextList, Annotated[list[Annotated[list[Text], refused_beyond(minItems=1, maxItems=1)]],
                                            refused_beyond(minItems=1)]]
    raw_scores: bool = False
    truncate: bool | None = None
    truncation_direction: Direction = "right"
    model: str | None = None


class TEIPrediction(Body):
    score: float
    label: str


class TEIPredictions(RootModel[Union[list[TEIPrediction], list[list[TEIPrediction]]]]):
    """Every label, best first: one list for one text, a list per text for a list."""


class ClassifyRequest(Body):
    """vLLM's /classify."""

    input: Texts
    model: str | None = None
    truncate_prompt_tokens: Optional[Annotated[Literal[-1], BeforeValidator(whole)]] = Field(
        None, description="-1 or none: long texts are cut at the model's max length")
    use_activation: bool | None = Field(None, description="false: logits instead of the head's probabilities")


class ClassificationData(Body):
    index: int
    label: str | None = Field(description="the label of the highest score")
    probs: list[float] = Field(description="a score per label, in the model's label order")
    num_classes: int


class ClassifyResponse(Body):
    id: str
    object: Literal["list"] = "list"
    created: int
    model: str
    data: list[ClassificationData]
    usage: Usage


@tei.post("/predict", responses=documented(s.TEIError, INFERS))
@answered
async def tei_predict(body: TEIPredictRequest, request: Request) -> TEIPredictions:
    call = RouteCall.of(request, CONTRACT, body.model)
    right_only(body.truncation_direction)
    single = isinstance(body.inputs, str)
    raw: list = [body.inputs] if single else list(body.inputs)
    if any(isinstance(x, list) and len(x) != 1 for x in raw):
        raise invalid(f"{call.model.name} classifies one text per input; pairs are not served", "inputs")
    texts = call.texts([x[0] if isinstance(x, list) else x for x in raw], "inputs")
    answer = await call.infer([(t,) for t in texts])
    refuse_truncated(answer, body.truncate, call.model)
    labels = call.model.head.labels
    rows = [[TEIPrediction.model_construct(score=float(row[j]), label=labels[j])
             for j in np.argsort(-row, kind="stable")]
            for row in CONTRACT.scores(answer, raw=body.raw_scores)]
    return TEIPredictions.model_construct(rows[0] if single else rows)


@vllm.post("/classify", responses=documented(s.OpenAIError, INFERS))
@answered
async def classify(body: ClassifyRequest, request: Request) -> ClassifyResponse:
    """`probs` are the head's probabilities (its softmax, or a sigmoid per label for a multi-label head), or with
    `use_activation: false` its logits, both as the graph returns them."""
    call = RouteCall.of(request, CONTRACT, body.model)
    answer = await call.infer([(t,) for t in call.texts(body.input, "input")])
    labels = call.model.head.labels
    rows = CONTRACT.scores(answer, raw=body.use_activation is False)
    used = tokens(answer)
    return ClassifyResponse.model_construct(
        id=f"classify-{uuid.uuid4().hex}", created=int(time.time()), model=call.model.name,
        data=[ClassificationData.model_construct(index=i, label=labels[int(np.argmax(row))], probs=row,
                                                 num_classes=len(labels))
              for i, row in enumerate(rows)],
        usage=Usage.model_construct(prompt_tokens=used, total_tokens=used))
