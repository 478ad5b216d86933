"""What the app holds for its whole life: settings, the catalog, the gRPC backend, tokenizers and metrics."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from fastapi import Request
from fastapi.responses import Response
from pydantic import BaseModel, RootModel

from .backend import DEFAULT_TIMEOUT_S, TritonBackend
from .catalog import Catalog, ServedModel
from .remote_images import ImageFetcher
from .rollout_routing import Rollouts
from .schemas import TEIInfo
from .statistics import ApiStatistics
from .task_routes import routes_of

DEFAULT_PORT = 8080
DEFAULT_MAX_BODY_BYTES = 2 * 1024 * 1024  # text-embeddings-inference's payload limit
DEFAULT_MAX_CLIENT_BATCH = 2048  # OpenAI's inputs per embeddings request; LangChain sends up to 1000
DEFAULT_MAX_CONCURRENT = 512  # text-embeddings-inference's default before it answers 429
API_KEY_ENV = "TRITONIZE_API_KEY"
# prometheus_client's multiprocess mode: with several workers, each keeps its series in files there, summed when read
MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class ApiSettings:
    repository: Path
    grpc_url: str = "127.0.0.1:8001"
    http_url: str | None = None  # Triton's HTTP endpoint, where the inferences go (api/triton_http.py)
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = field(default=None, repr=False)  # never printed
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_client_batch_size: int = DEFAULT_MAX_CLIENT_BATCH
    max_concurrent_requests: int = DEFAULT_MAX_CONCURRENT
    timeout_s: float = DEFAULT_TIMEOUT_S
    workers: int = 1  # processes answering on the port (api/server.py)
    # Where a request does not say: a text longer than the model reads is embedded as windows (docs/api.md).
    chunked_processing: bool = False
    chunk_overlap: int = 0  # tokens each window shares with the one before it
    # The hosts (host or host:port) whose images a request may name by URL; none: only the images' bytes are taken.
    image_hosts: tuple[str, ...] = ()
    # Requests to one model that arrive together go to Triton as one request (api/coalesce.py).
    coalesce: bool = True


def fields_of(value: Any) -> Any:
    """A response model as orjson writes it: its fields in order, less those left unset and empty (a rerank
    result's document without return_documents); a root model as its root."""
    if isinstance(value, RootModel):
        return value.root
    if isinstance(value, BaseModel):
        given = value.model_fields_set
        return {k: v for k, v in value.__dict__.items() if v is not None or k in given}
    raise TypeError(f"{type(value).__name__} is not JSON")


def json_response(content: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """orjson straight from numpy arrays (float32 rows are written as float32, shortest round-trip), and from
    the response models holding them."""
    body = orjson.dumps(content, default=fields_of, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


class ApiState:
    def __init__(self, settings: ApiSettings, catalog: Catalog | None = None):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.settings = settings
        self.catalog = Catalog.read(settings.repository) if catalog is None else catalog
        self.backend = TritonBackend(settings.grpc_url, settings.timeout_s, settings.coalesce,
                                     settings.http_url)
        self.images = ImageFetcher(settings.image_hosts, settings.max_body_bytes)
        self.outputs: dict[str, tuple[str, ...]] = {}  # what each ensemble returns, asked of Triton at start
        self._tokenizers: dict[str, Any] = {}
        self.in_flight = 0
        self.route_paths: frozenset[str] = frozenset()  # the app's own routes: the metrics' route label
        self.envelopes: dict[str, str] = {}  # each route's error envelope (routes.envelopes), set with the routes
        self.registry = CollectorRegistry()
        self.requests = Counter("tritonize_api_requests", "API requests by route, model, the model's version that "
                                "answered and status", ("route", "model", "version", "status"), registry=self.registry)
        self.latency = Histogram("tritonize_api_request_duration_seconds", "API request latency by route, model and "
                                 "version", ("route", "model", "version"), registry=self.registry,
                                 buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.rollouts = Rollouts(settings.repository, self.registry,
                                 lambda name: self.catalog.find_any(name).manifest.version)
        self.in_flight_gauge = Gauge("tritonize_api_in_flight", "API requests being answered", registry=self.registry,
                                     multiprocess_mode="livesum")
        self.statistics = ApiStatistics(self.registry)

    def exposition(self) -> bytes:
        """The metrics in Prometheus' text format: this process's, or, with several workers (prometheus_client's
        multiprocess mode), every worker's summed."""
        from prometheus_client import CollectorRegistry, generate_latest, multiprocess

        self.statistics.flush()  # the answers waiting to be counted (api/statistics.py), counted before they are read
        if not os.environ.get(MULTIPROCESS_ENV):
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry)

    async def open(self) -> None:
        await self.backend.open()
        await self.learn_outputs()
        for model in self.catalog.models:
            self.statistics.declare(model)

    async def learn_outputs(self) -> None:
        """Which outputs each ensemble has (token counts only in repositories that report them)."""
        for model in self.catalog.models:
            names = await self.backend.output_names(model.name)
            if names is None:
                self.outputs.pop(model.name, None)  # asked again at the next start; counts are 0 until then
            else:
                self.outputs[model.name] = names

    def tokenizer(self, model: ServedModel, stride: int = 0):
        """The served step's tokenizer file, for /tokenize, and with `stride`, for counting a long text's windows
        before they are embedded (inference never tokenizes in the API)."""
        key = (model.name, stride)
        if key not in self._tokenizers:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(model.tokenizer_file))
            tok.no_padding()
            tok.enable_truncation(model.max_length, stride=stride)
            self._tokenizers[key] = tok
        return self._tokenizers[key]

    def info(self, model: ServedModel) -> TEIInfo:
        """text-embeddings-inference's /info for one model."""
        from .. import __version__

        return TEIInfo.model_construct(
            model_id=model.name,
            model_sha=None,
            model_dtype=model.manifest.options.precision or "fp32",
            model_type=routes_of(model.head).info_type(model.head),
            max_concurrent_requests=self.settings.max_concurrent_requests,
            max_input_length=model.max_length,
            max_batch_tokens=model.max_length * model.max_batch_size,
            max_batch_requests=model.max_batch_size,
            max_client_batch_size=self.settings.max_client_batch_size,
            auto_truncate=True,
            tokenization_workers=int(model.manifest.options.tokenizer_instances or 1),
            version=__version__,
            sha=None,
            docker_label=None,
            task=model.contract.name,
            source=model.manifest.model.source,
        )


def state_of(request: Request) -> ApiState:
    return request.app.state.api


def noted(request: Request) -> dict[str, Any]:
    """What a handler notes of its request (its model, the version that answered, response headers), read by the
    guard and the dispatch: the scope's own dict, which starlette's `request.state` wraps in an object per request."""
    return request.scope.setdefault("state", {})
