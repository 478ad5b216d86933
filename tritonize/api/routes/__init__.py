"""The routes: those several tasks share or that read any model, one module per family of clients (OpenAI's model
list: openai.py; Cohere's and Jina's rerank: cohere.py; text-embeddings-inference's /rerank, /tokenize, /decode,
/info: tei.py; NVIDIA NIM's ranking: nim.py; vLLM's score: score.py; operations: ops.py), and every task's own
routes, declared in its package (tritonize/tasks/<task>/api.py) and found through the task registry.

What the routes share: responses.py (the statuses a route documents, the fast response path), parameters.py
(texts, prompts, truncation), inference.py (one inference, tokens, truncation, ranking), canary.py (which version
answers during a rollout), families.py (each family's tag and error envelope). A route names the task it serves
and asks the catalog for the model; the task's contract decodes what Triton returned. A handler returns its
response model, so the OpenAPI document is what the handlers return.
"""

from __future__ import annotations

from ... import tasks
from . import cohere, nim, ops, openai, score, tei
from .families import Envelope, Router

SHARED = (openai.router, cohere.router, tei.router, nim.router, score.router)


def routers() -> tuple[Router, ...]:
    """Every route of the app: the shared families', each registered task's (registry order), operations last."""
    return (*SHARED, *(router for api in tasks.sides("api") for router in api.ROUTERS), ops.router)


def envelopes() -> dict[str, Envelope]:
    """Each route's error envelope, by path (a route not listed answers in OpenAI's)."""
    return {route.path: router.family.envelope for router in routers() for route in router.routes}


def paths(envelope: Envelope) -> frozenset[str]:
    """The routes that answer errors in this envelope."""
    return frozenset(path for path, kind in envelopes().items() if kind == envelope)
