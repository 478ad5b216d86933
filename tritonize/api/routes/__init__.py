"""The routes, one module per family of clients: OpenAI (openai.py), Cohere/Jina (cohere.py),
text-embeddings-inference (tei.py), NVIDIA NIM (nim.py), vLLM's score (score.py) and classify (classify.py),
tritonize's own (own.py) and operations (ops.py); common.py holds what they share.

Each route names the task it serves (api/task_routes.py) and asks the catalog for the model; the task's answers
decode what Triton returned, and the arithmetic a route adds on top of them (sorting, top-n, Matryoshka
truncation, base64) is the route's. A handler returns its response model (api/schemas.py), and `answered` writes
it on the fast path, so the OpenAPI document is what the handlers return. Every status a route can answer is
declared with it, from errors.STATUSES.
"""

from __future__ import annotations

from . import classify, cohere, nim, openai, ops, own, score, tei

ROUTERS = (openai.router, cohere.router, tei.router, nim.router, score.router, classify.router, own.router,
           ops.router)
# Routes whose errors use text-embeddings-inference's envelope, NIM's and Cohere's; every other route uses OpenAI's.
TEI_PATHS = frozenset(route.path for route in (*tei.router.routes, *ops.router.routes))
NIM_PATHS = frozenset(route.path for route in nim.router.routes)
COHERE_PATHS = frozenset({cohere.EMBED_PATH})  # Cohere's envelope; its rerank keeps OpenAI's
