"""Which version of a model answers a request during a rollout (api/rollout_routing.py), and what a canary's failure
falls back to."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np
from fastapi import Request

from ..backend import Parameters
from ..catalog import ServedModel
from ..errors import ApiError
from ..rollout_routing import CALLER_FAULTS, CALLER_HEADER
from ..state import ApiState, noted

CALLER = CALLER_HEADER.lower().encode("latin-1")


def caller(request: Request) -> str | None:
    """The request's caller id, read from the raw headers (no header mapping built for one lookup)."""
    for name, value in request.scope["headers"]:
        if name == CALLER:
            return value.decode("latin-1")
    return None


async def infer(state: ApiState, request: Request, model: ServedModel, inputs: Mapping[str, list[str]],
                outputs: Sequence[str], parameters: Parameters | None = None) -> dict[str, np.ndarray]:
    """One inference through the version the rollout routes this caller to: a canary's failure that is not the
    request's own is answered by the served version; the version that answered is the request's."""
    model.refuse_unreadable(inputs)
    target = state.rollouts.target(model.name, caller(request))
    if target.candidate:
        start = time.perf_counter()
        try:
            answer = await state.backend.infer(model, inputs, outputs, target.name, parameters)
        except ApiError as exc:
            if exc.status in CALLER_FAULTS:
                raise
            state.rollouts.record(model.name, target, False, time.perf_counter() - start)
            target = state.rollouts.served_target(model.name)
        else:
            state.rollouts.record(model.name, target, True, time.perf_counter() - start)
            noted(request)["version"] = str(target.version)
            state.statistics.observe(model, str(target.version), answer)
            return answer
    noted(request)["version"] = str(target.version)
    start = time.perf_counter()
    answer = await state.backend.infer(model, inputs, outputs, parameters=parameters)
    state.rollouts.record(model.name, target, True, time.perf_counter() - start)
    state.statistics.observe(model, str(target.version), answer)
    return answer
