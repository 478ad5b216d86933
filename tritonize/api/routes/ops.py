"""Operations: health through every ensemble, and Prometheus metrics."""

from __future__ import annotations

import time

from fastapi import Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from ...tasks.contract import SAMPLE_TEXT, TaskContract
from .. import schemas as s
from ..errors import ApiError
from ..state import state_of
from .families import OPERATIONS, Router
from .responses import GUARDED, answered, documented

router = Router(OPERATIONS)


@router.get("/health", responses=documented(s.TEIError, (405, 413, 429, 503)))
@answered
async def health(request: Request) -> s.Health:
    """A real inference through every served ensemble, as text-embeddings-inference's /health runs one."""
    state = state_of(request)
    start = time.perf_counter()
    for model in state.catalog.models:
        contract: TaskContract = model.contract
        try:
            await state.backend.infer(model, contract.request([contract.row_for(SAMPLE_TEXT)]),
                                      list(contract.output_names))
        except ApiError as exc:
            raise ApiError(503, f"{model.name} does not answer: {exc.message}") from None
    return s.Health.model_construct(models=[m.name for m in state.catalog.models],
                                    latency_ms=round((time.perf_counter() - start) * 1e3, 2))


class MetricsResponse(Response):
    media_type = CONTENT_TYPE_LATEST


@router.get("/metrics", response_class=MetricsResponse, responses={
    200: {"description": "Prometheus' text exposition format",
          "content": {CONTENT_TYPE_LATEST: {"schema": {"type": "string"}}}},
    **documented(s.TEIError, GUARDED)})
async def metrics(request: Request) -> Response:
    return MetricsResponse(state_of(request).exposition())
