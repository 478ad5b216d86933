"""What a task's route handler needs from the API, in one place (text-embeddings-inference's router asks its core
the same way): the model its body names, its texts bounded, one inference through that model's ensemble. Every
task route's handler begins with `RouteCall.of`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import Request

from ..tasks.contract import TaskContract
from .backend import Parameters
from .catalog import ServedModel
from .routes.inference import infer_inputs, run
from .routes.parameters import texts_of
from .state import ApiState, state_of


@dataclass(frozen=True)
class RouteCall:
    state: ApiState
    request: Request
    model: ServedModel

    @classmethod
    def of(cls, request: Request, contracts: TaskContract | tuple[TaskContract, ...], name: str | None) -> RouteCall:
        """The request's call on the model its body names, which must serve one of `contracts` (unnamed: the only
        such model)."""
        state = state_of(request)
        return cls(state, request, state.catalog.find(contracts, name))

    def texts(self, value: Any, param: str) -> list[str]:
        """A string or a list of them, bounded by the server's --max-client-batch-size."""
        return texts_of(value, param, self.state.settings.max_client_batch_size)

    async def infer(self, rows: Sequence[tuple[str, ...]],
                    parameters: Parameters | None = None) -> dict[str, np.ndarray]:
        """The model's ensemble's answer to these rows (one text per text input each)."""
        return await run(self.state, self.request, self.model, rows, parameters)

    async def infer_inputs(self, inputs: Mapping[str, Sequence],
                           parameters: Parameters | None = None) -> dict[str, np.ndarray]:
        """The model's ensemble's answer to these inputs by name (texts, or images' bytes)."""
        return await infer_inputs(self.state, self.request, self.model, inputs, parameters)
